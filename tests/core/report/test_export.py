"""Export bundles: contents, manifest checksums, the Triton config read back, real OpenVINO IR."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest

from optistudio.core.batching.triton import parse_pbtxt
from optistudio.core.model.intake import inspect_model
from optistudio.core.report.bundle import BundleSource, safe_name, verify_bundle, write_bundle


def source_of(path: Path, **kwargs: object) -> BundleSource:
    info = inspect_model(path)
    return BundleSource(name="tiny · int8", model_path=path, info=info, **kwargs)  # type: ignore[arg-type]


def members(bundle: Path) -> set[str]:
    with zipfile.ZipFile(bundle) as z:
        return set(z.namelist())


def test_bundle_has_every_part_and_checksums_match(tiny_model: Path, tmp_path: Path) -> None:
    steps: list[str] = []
    report = write_bundle(
        source_of(
            tiny_model, batch_sizes=[1, 8], benchmarks=[{"p50_ms": 1.0}], coreml_precisions=[]
        ),
        tmp_path / "out" / "bundle.zip",
        progress=lambda fraction, step: steps.append(step),
    )
    assert members(report.path) == {
        "model/tiny.onnx",
        "recipe.json",
        "reports/accuracy.json",
        "reports/benchmark.json",
        "pipeline.json",
        "triton/tiny_int8/config.pbtxt",
        "triton/tiny_int8/1/model.onnx",
        "openvino/tiny_int8.xml",
        "openvino/tiny_int8.bin",
        "openvino/compile_config.json",
        "openvino/run.py",
        "SHA256SUMS",
        "manifest.json",
    }
    assert verify_bundle(report.path) == []
    # no TensorRT worker here: said, not faked; Core ML has its own tests (test_export_coreml.py)
    assert set(report.skipped) == {"tensorrt", "cann", "coreml"}
    assert "Ascend CANN toolkit and an Ascend NPU driver" in report.skipped["cann"]
    assert steps[-1] == "Bundle written"
    with zipfile.ZipFile(report.path) as z:
        sums = dict(line.split("  ")[::-1] for line in z.read("SHA256SUMS").decode().splitlines())
        for member, digest in sums.items():
            assert hashlib.sha256(z.read(member)).hexdigest() == digest
        assert z.read("triton/tiny_int8/1/model.onnx") == tiny_model.read_bytes()
        assert set(sums) == members(report.path) - {"SHA256SUMS", "manifest.json"}
    assert not list(tmp_path.glob("out/*.partial"))


def test_triton_config_parses_back(tiny_model: Path, tmp_path: Path) -> None:
    bundle = write_bundle(source_of(tiny_model, batch_sizes=[1, 4, 8]), tmp_path / "b.zip").path
    with zipfile.ZipFile(bundle) as z:
        config = parse_pbtxt(z.read("triton/tiny_int8/config.pbtxt").decode())
    assert config["name"] == "tiny_int8"
    assert config["platform"] == "onnxruntime_onnx"
    assert config["max_batch_size"] == 8
    assert config["dynamic_batching"]["preferred_batch_size"] == [4, 8]
    assert config["input"][0]["name"] == "x" and config["input"][0]["dims"] == [16]
    assert config["output"][0]["dims"] == [8]


def test_openvino_ir_runs_like_the_onnx_model(tiny_model: Path, tmp_path: Path) -> None:
    import onnxruntime as ort
    import openvino as ov

    bundle = write_bundle(source_of(tiny_model), tmp_path / "b.zip").path
    with zipfile.ZipFile(bundle) as z:
        z.extractall(tmp_path / "unzipped")
    x = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)
    xml = str(tmp_path / "unzipped/openvino/tiny_int8.xml")
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    got = compiled(x)[0]
    expected = ort.InferenceSession(str(tiny_model)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_a_batch_fixed_at_1_is_served_by_triton_through_its_checked_rewrite(
    make_model, tmp_path: Path
) -> None:
    import json

    fixed = make_model("fixed.onnx", batch=1)
    served = {"max_batch_size": 4, "timeout_ms": 2.0, "instances": 1}
    report = write_bundle(source_of(fixed, serving=served), tmp_path / "b.zip")

    with zipfile.ZipFile(report.path) as z:
        config = parse_pbtxt(z.read("triton/tiny_int8/config.pbtxt").decode())
        triton_model = z.read("triton/tiny_int8/1/model.onnx")
        pipeline = json.loads(z.read("pipeline.json"))
        original = z.read("model/fixed.onnx")
    rewrite = tmp_path / "rewrite.onnx"
    rewrite.write_bytes(triton_model)
    assert "triton" not in report.skipped and config["max_batch_size"] == 4
    assert original == fixed.read_bytes() and triton_model != original
    assert not isinstance(inspect_model(rewrite).inputs[0].shape[0], int)  # a free batch
    assert "batch is fixed at 1" in pipeline["triton_served"]
    assert verify_bundle(report.path) == []


def test_a_batch_that_cannot_be_freed_is_served_by_triton_without_batching(
    tmp_path: Path,
) -> None:
    import json

    from batching_helpers import build_batch_mixing_model

    mixing = build_batch_mixing_model(tmp_path / "mixing.onnx")
    served = {"max_batch_size": 1, "timeout_ms": 0.0, "instances": 2}
    report = write_bundle(source_of(mixing, serving=served), tmp_path / "b.zip")

    with zipfile.ZipFile(report.path) as z:
        config = parse_pbtxt(z.read("triton/tiny_int8/config.pbtxt").decode())
        pipeline = json.loads(z.read("pipeline.json"))
    assert config["max_batch_size"] == 0 and "dynamic_batching" not in config
    assert config["input"][0]["dims"] == [1, 4]  # the batch dim written as declared
    assert config["instance_group"][0]["count"] == 2
    assert "no batching (max_batch_size 0) on 2 instance(s)" in pipeline["triton_served"]


def test_external_data_travels_with_the_model(tiny_model: Path, tmp_path: Path) -> None:
    folder = tmp_path / "ext"
    folder.mkdir()
    model = onnx.load(str(tiny_model))
    onnx.save(
        model,
        folder / "model.onnx",
        save_as_external_data=True,
        location="weights.bin",
        size_threshold=0,
    )
    report = write_bundle(source_of(folder / "model.onnx"), tmp_path / "b.zip")
    assert {"model/model.onnx", "model/weights.bin", "triton/tiny_int8/1/weights.bin"} <= members(
        report.path
    )


def test_a_tampered_bundle_is_caught(tiny_model: Path, tmp_path: Path) -> None:
    bundle = write_bundle(source_of(tiny_model), tmp_path / "b.zip").path
    tampered = tmp_path / "t.zip"
    with zipfile.ZipFile(bundle) as src, zipfile.ZipFile(tampered, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            dst.writestr(item, b"evil" if item.filename == "pipeline.json" else data)
    assert verify_bundle(tampered) == ["pipeline.json"]


@pytest.mark.parametrize(
    ("name", "expected"), [("tiny · int8", "tiny_int8"), ("../../etc", "etc"), ("···", "model")]
)
def test_names_are_made_safe(name: str, expected: str) -> None:
    assert safe_name(name) == expected


def test_unzipped_files_are_readable_by_other_users(tiny_model: Path, tmp_path: Path) -> None:
    report = write_bundle(source_of(tiny_model), tmp_path / "bundle.zip")

    with zipfile.ZipFile(report.path) as z:
        modes = {info.filename: (info.external_attr >> 16) & 0o777 for info in z.infolist()}

    assert set(modes.values()) == {0o644}  # `unzip` applies these; zip's default is 0600


def read_json(bundle: Path, member: str) -> dict:  # type: ignore[type-arg]
    import json

    with zipfile.ZipFile(bundle) as z:
        return dict(json.loads(z.read(member)))


@pytest.mark.parametrize(
    ("recipe", "target", "served"),
    [
        ({"name": "int8_nncf", "backend": "openvino"}, "any", "openvino"),
        ({"name": "int8_nncf", "backend": None}, "openvino", "openvino"),
        ({"name": "int8_static", "backend": None}, "any", "onnxruntime"),
    ],
    ids=["recipe-for-openvino", "run-for-openvino", "onnxruntime"],
)
def test_the_triton_config_names_the_backend_the_variant_is_made_for(  # type: ignore[no-untyped-def]
    tiny_model: Path, tmp_path: Path, recipe, target, served
) -> None:
    reproduce = {"optimize_spec": {"target_backend": target}}
    source = source_of(
        tiny_model, batch_sizes=[1, 4], recipe=recipe, reproduce=reproduce, coreml_precisions=[]
    )

    bundle = write_bundle(source, tmp_path / "b.zip").path

    with zipfile.ZipFile(bundle) as z:
        config = parse_pbtxt(z.read("triton/tiny_int8/config.pbtxt").decode())
    if served == "openvino":
        assert config["backend"] == "openvino" and "platform" not in config
        assert config["default_model_filename"] == "model.onnx"  # the file in 1/ it serves
    else:
        assert config["platform"] == "onnxruntime_onnx" and "backend" not in config
    assert config["dynamic_batching"]["preferred_batch_size"] == [4, 8]  # batching as it was
    assert read_json(bundle, "pipeline.json")["backend"] == served


def test_the_reproduce_command_runs_at_the_inputs_the_variant_ran_at(
    tiny_model: Path, tmp_path: Path
) -> None:
    fed = {"shapes": {"x": [1, 16]}, "dims": {"x.0": 4}, "values": {"sr": 16000.0}}
    reproduce = {"command": "optistudio optimize tiny.onnx --recipe graph --out variants/"}
    source = source_of(
        tiny_model, reproduce=reproduce | {"optimize_spec": fed}, coreml_precisions=[]
    )

    bundle = write_bundle(source, tmp_path / "b.zip").path

    command = read_json(bundle, "recipe.json")["command"]
    assert command.startswith(reproduce["command"])
    assert command.endswith(" --shape x=1,16 --dim x.0=4 --value sr=16000")


def test_pipeline_json_writes_a_long_symbolic_dim_as_a_placeholder(
    tiny_model: Path, tmp_path: Path
) -> None:
    expression = "floor((sequence + -1) / 2) + floor((sequence + -1) / 4) + 1" * 5
    info = inspect_model(tiny_model)
    output = info.outputs[0].model_copy(update={"shape": ["batch", expression]})
    source = BundleSource(
        name="tiny",
        model_path=tiny_model,
        info=info.model_copy(update={"outputs": [output]}),
        coreml_precisions=[],
    )

    pipeline = read_json(write_bundle(source, tmp_path / "b.zip").path, "pipeline.json")

    assert pipeline["outputs"][0]["shape"] == ["batch", "s1"]
    assert pipeline["symbolic_dims"] == {"s1": expression}
    assert pipeline["inputs"][0]["shape"] == [d for d in info.inputs[0].shape]
