"""The bundle of a variant that exists only as OpenVINO IR (NNCF's INT8 on the OpenVINO model):
the IR in openvino/ and in a Triton repository served by the openvino backend at its precision,
pipeline.json naming the IR, the manifest naming backend, precision and threads, and every
part made from ONNX saying in one sentence that there is no ONNX file of it."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from optistudio.core.batching.pipeline_file import opened_pipeline, parse_pipeline
from optistudio.core.errors import InvalidSpec
from optistudio.core.model.stored_ir import store_ir
from optistudio.core.report.bundle import BundleSource, verify_bundle, write_bundle
from tests.core.report.test_written_artifacts import parsed
from tests.ir_models import cnn_ir

INT8 = {"name": "int8_nncf_ov", "backend": "openvino"}
INT8_BF16 = {"name": "int8_nncf_ov_bf16", "backend": "openvino", "precision": "bf16"}


def ir_bundle(folder: Path, recipe: dict[str, Any], precision: str) -> Path:
    ir, like = cnn_ir(folder / "made")
    stored = store_ir(ir, artifact_dir=folder / "store", like=like)
    source = BundleSource(
        name="cnn · int8",
        model_path=stored.path,
        info=stored.info,
        precision=precision,
        recipe=recipe,
        backend="openvino",
        threads=2,
    )
    return write_bundle(source, folder / "bundle.zip").path


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ir_bundle(tmp_path_factory.mktemp("ir"), INT8, "int8")


def members(bundle: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(bundle) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def test_the_ir_is_the_openvino_part_and_the_triton_model(bundle: Path) -> None:
    files = members(bundle)
    stored = sorted(Path(parse_pipeline(files["pipeline.json"]).model).parts)

    assert files["openvino/cnn_int8.xml"] == files["triton/cnn_int8/1/model.xml"]
    assert files["openvino/cnn_int8.bin"] == files["triton/cnn_int8/1/model.bin"]
    assert stored == ["cnn_int8.xml", "openvino"]
    assert not [name for name in files if name.startswith(("model/", "coreml/", "litert/"))]
    assert not [name for name in files if name.endswith(".onnx")]
    assert verify_bundle(bundle) == []


def test_the_triton_config_is_the_openvino_backends_and_parses(bundle: Path) -> None:
    config = parsed(members(bundle)["triton/cnn_int8/config.pbtxt"].decode())

    assert (config.backend, config.platform) == ("openvino", "")
    assert config.default_model_filename == "model.xml"
    assert config.parameters["INFERENCE_NUM_THREADS"].string_value == "2"
    assert "HINT_BF16" not in config.parameters
    assert [i.name for i in config.input] == ["x"] and list(config.input[0].dims) == [3, 16, 16]
    assert config.max_batch_size > 0  # the IR keeps the free batch: Triton batches it


def test_the_manifest_and_pipeline_say_how_it_runs_and_what_is_left_out(bundle: Path) -> None:
    files = members(bundle)
    manifest = json.loads(files["manifest.json"])
    pipeline = parse_pipeline(files["pipeline.json"])

    runs_as = manifest["runs_as"]
    assert (runs_as["backend"], runs_as["precision"], runs_as["threads"]) == ("openvino", "int8", 2)
    assert manifest["model_format"] == pipeline.format == "openvino_ir"
    assert (pipeline.backend, pipeline.precision) == ("openvino", "int8")
    for part in ("model", "cann", "tensorrt", "coreml", "litert"):
        assert "exists only as OpenVINO IR" in manifest["skipped"][part], part
    assert "openvino" not in manifest["skipped"] and "triton" not in manifest["skipped"]
    config = json.loads(files["openvino/compile_config.json"])
    assert config == {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": "2"}


def test_int8_with_the_rest_in_bf16_asks_triton_for_bf16(tmp_path: Path) -> None:
    bundle = ir_bundle(tmp_path, INT8_BF16, "int8+bf16")

    files = members(bundle)
    config = parsed(files["triton/cnn_int8/config.pbtxt"].decode())

    assert config.parameters["HINT_BF16"].string_value == "YES"
    assert json.loads(files["openvino/compile_config.json"])["INFERENCE_PRECISION_HINT"] == "bf16"
    assert json.loads(files["manifest.json"])["runs_as"]["precision"] == "int8+bf16"


def test_the_bundled_ir_runs_on_openvino(bundle: Path, tmp_path: Path) -> None:
    import numpy as np
    import openvino as ov

    with zipfile.ZipFile(bundle) as archive:
        archive.extractall(tmp_path)
    compiled = ov.Core().compile_model(str(tmp_path / "openvino" / "cnn_int8.xml"), "CPU")

    [output] = compiled({"x": np.ones((2, 3, 16, 16), np.float32)}).values()

    assert output.shape == (2, 4)


def test_serving_the_bundle_with_the_batching_runtime_is_refused_in_a_sentence(
    bundle: Path,
) -> None:
    with opened_pipeline(bundle) as opened, pytest.raises(InvalidSpec, match="only as OpenVINO IR"):
        _ = opened.model_path
