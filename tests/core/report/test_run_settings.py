"""The backend, precision and threads a variant was measured at reach every part of its bundle:
the Triton config (the openvino backend with its parameters, read by Triton's own ModelConfig
protobuf), the OpenVINO IR's compile config and run script, the manifest and pipeline.json."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format

from optistudio.core.batching.triton import parse_pbtxt
from optistudio.core.model.intake import inspect_model
from optistudio.core.report.bundle import BundleSource, write_bundle
from optistudio.core.report.run_settings import RunSettings, run_settings

BF16_RECIPE = {"name": "bf16", "backend": "openvino", "precision": "bf16", "steps": []}
FP16_RECIPE = {"name": "fp16_inference", "backend": "openvino", "precision": "fp16", "steps": []}
INT8_BF16_RECIPE = {"name": "int8_nncf_bf16", "backend": "openvino", "precision": "bf16"}


def triton_model_config() -> ModuleType:
    """Triton's ModelConfig protobuf, from tritonclient's own file (no grpcio needed)."""
    found = importlib.util.find_spec("tritonclient")
    assert found is not None and found.submodule_search_locations
    path = Path(next(iter(found.submodule_search_locations))) / "grpc" / "model_config_pb2.py"
    spec = importlib.util.spec_from_file_location("run_settings_model_config_pb2", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MODEL_CONFIG = triton_model_config()


def bundle_of(model: Path, folder: Path, **source: Any) -> Path:
    info = inspect_model(model)
    made = BundleSource(name="tiny", model_path=model, info=info, coreml_precisions=[], **source)
    return write_bundle(made, folder / "bundle.zip").path


def read(bundle: Path, member: str) -> str:
    with zipfile.ZipFile(bundle) as z:
        return z.read(member).decode()


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        (
            {"recipe": BF16_RECIPE, "precision": "bf16", "backend": "openvino"},
            ("openvino", "bf16"),
        ),
        (
            {"recipe": {"name": "int8_nncf"}, "precision": "int8", "backend": "openvino"},
            ("openvino", "fp32"),
        ),
        (
            {
                "recipe": {"name": "int8_nncf"},
                "precision": "int8",
                "backend": None,
                "target": "openvino",
            },
            ("openvino", "fp32"),
        ),
        (
            {"recipe": None, "precision": "fp32", "backend": None, "target": "any"},
            ("onnxruntime", None),
        ),
        ({"recipe": {"name": "fp16"}, "precision": "fp16", "backend": None}, ("onnxruntime", None)),
    ],
    ids=[
        "row-backend",
        "int8-on-openvino-at-f32",
        "run-target",
        "any-is-onnxruntime",
        "onnxruntime",
    ],
)
def test_the_run_settings_of_a_stored_model(kwargs: dict[str, Any], expected: tuple) -> None:  # type: ignore[type-arg]
    run = run_settings(**kwargs)

    assert (run.backend, run.inference_precision) == expected


@pytest.mark.parametrize(
    ("threads", "said"),
    [
        (None, "BF16 inference on OpenVINO, default threads"),
        (1, "BF16 inference on OpenVINO, 1 thread"),
        (4, "BF16 inference on OpenVINO, 4 threads"),
    ],
    ids=["default", "one", "four"],
)
def test_the_settings_are_said_with_their_threads(threads: int | None, said: str) -> None:
    run = RunSettings(
        backend="openvino", precision="bf16", inference_precision="bf16", threads=threads
    )

    assert run.said() == said


def test_a_bf16_variant_on_openvino_exports_as_bf16_on_openvino(
    tiny_model: Path, tmp_path: Path
) -> None:
    bundle = bundle_of(
        tiny_model, tmp_path, recipe=BF16_RECIPE, precision="bf16", backend="openvino", threads=2
    )

    text = read(bundle, "triton/tiny/config.pbtxt")
    config = text_format.Parse(text, MODEL_CONFIG.ModelConfig())  # as Triton reads it
    assert config.backend == "openvino" and config.platform == ""
    assert {key: value.string_value for key, value in config.parameters.items()} == {
        "HINT_BF16": "YES",
        "INFERENCE_NUM_THREADS": "2",
    }
    assert len(parse_pbtxt(text)["parameters"]) == 2  # our own reader keeps both
    assert json.loads(read(bundle, "openvino/compile_config.json")) == {
        "INFERENCE_PRECISION_HINT": "bf16",
        "INFERENCE_NUM_THREADS": "2",
    }
    runs_as = json.loads(read(bundle, "manifest.json"))["runs_as"]
    assert (runs_as["backend"], runs_as["precision"], runs_as["threads"]) == ("openvino", "bf16", 2)
    assert runs_as["said"] == "BF16 inference on OpenVINO, 2 threads" and runs_as["note"] == ""
    pipeline = json.loads(read(bundle, "pipeline.json"))
    assert (pipeline["backend"], pipeline["precision"]) == ("openvino", "bf16")


def test_int8_with_the_rest_in_bf16_keeps_both_in_the_manifest(
    tiny_model: Path, tmp_path: Path
) -> None:
    bundle = bundle_of(
        tiny_model, tmp_path, recipe=INT8_BF16_RECIPE, precision="int8+bf16", backend="openvino"
    )

    runs_as = json.loads(read(bundle, "manifest.json"))["runs_as"]
    config = text_format.Parse(read(bundle, "triton/tiny/config.pbtxt"), MODEL_CONFIG.ModelConfig())

    assert runs_as["precision"] == "int8+bf16" and runs_as["inference_precision"] == "bf16"
    assert runs_as["said"] == "INT8+BF16 inference on OpenVINO, default threads"
    assert dict(config.parameters)["HINT_BF16"].string_value == "YES"
    assert "INFERENCE_NUM_THREADS" not in config.parameters


def test_what_tritons_openvino_backend_cannot_say_is_written_not_faked(
    tiny_model: Path, tmp_path: Path
) -> None:
    bundle = bundle_of(
        tiny_model, tmp_path, recipe=FP16_RECIPE, precision="fp16", backend="openvino"
    )

    config = text_format.Parse(read(bundle, "triton/tiny/config.pbtxt"), MODEL_CONFIG.ModelConfig())
    runs_as = json.loads(read(bundle, "manifest.json"))["runs_as"]

    assert config.backend == "openvino" and "HINT_BF16" not in config.parameters
    assert "no setting for fp16 inference" in runs_as["note"]
    assert runs_as["openvino_compile_config"] == {"INFERENCE_PRECISION_HINT": "f16"}


def test_an_original_exports_as_fp32_on_onnx_runtime_everywhere(
    tiny_model: Path, tmp_path: Path
) -> None:
    bundle = bundle_of(tiny_model, tmp_path)

    config = text_format.Parse(read(bundle, "triton/tiny/config.pbtxt"), MODEL_CONFIG.ModelConfig())
    runs_as = json.loads(read(bundle, "manifest.json"))["runs_as"]

    assert config.platform == "onnxruntime_onnx" and not config.parameters
    assert runs_as["said"] == "FP32 inference on ONNX Runtime, default threads"
    # the IR is compiled at f32 as ONNX Runtime computed, not OpenVINO's BF16 default on AMX
    assert json.loads(read(bundle, "openvino/compile_config.json")) == {
        "INFERENCE_PRECISION_HINT": "f32"
    }


def test_the_bundles_openvino_run_script_compiles_the_ir_as_measured_and_runs_it(
    tiny_model: Path, tmp_path: Path
) -> None:
    bundle = bundle_of(
        tiny_model,
        tmp_path,
        recipe={"name": "fp32@openvino", "backend": "openvino"},
        backend="openvino",
        threads=1,
    )
    with zipfile.ZipFile(bundle) as z:
        z.extractall(tmp_path / "unzipped")
    info = inspect_model(tiny_model)
    feeds = {
        spec.name: np.ones([d if isinstance(d, int) else 2 for d in spec.shape], np.float32)
        for spec in info.inputs
    }
    np.savez(tmp_path / "inputs.npz", **feeds)  # type: ignore[arg-type]

    ran = subprocess.run(
        [sys.executable, str(tmp_path / "unzipped/openvino/run.py"), str(tmp_path / "inputs.npz")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0] == "compiled at f32"
    assert [line.split(" ")[0] for line in lines[1:]] == [spec.name for spec in info.outputs]
