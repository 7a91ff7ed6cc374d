"""The bundle carries the batching settings a Verify measured: Triton's dynamic batcher and
instance_group count, and pipeline.json's "serving"."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.triton import parse_pbtxt
from optistudio.core.model.intake import inspect_model
from optistudio.core.report.bundle import BundleSource, write_bundle


def bundle_of(model: Path, folder: Path, serving: dict | None) -> zipfile.ZipFile:  # type: ignore[type-arg]
    source = BundleSource(
        name="tiny",
        model_path=model,
        info=inspect_model(model),
        batch_sizes=[1, 8],
        coreml_precisions=[],
        serving=serving,
    )
    return zipfile.ZipFile(write_bundle(source, folder / "bundle.zip").path)


def test_the_settings_verify_measured_reach_triton_and_pipeline_json(
    tiny_model: Path, tmp_path: Path
) -> None:
    verified = BatchingSettings(max_batch_size=4, timeout_ms=1.5, instances=2)
    serving = verified.model_dump(mode="json") | {"verify_job": 12}

    with bundle_of(tiny_model, tmp_path, serving) as bundle:
        config = parse_pbtxt(bundle.read("triton/tiny/config.pbtxt").decode())
        pipeline = json.loads(bundle.read("pipeline.json"))

    assert config["instance_group"][0]["count"] == 2
    assert config["max_batch_size"] == 4
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 1500
    assert pipeline["serving"]["instances"] == 2 and pipeline["serving"]["verify_job"] == 12


def test_without_a_stored_setting_the_bundle_batches_at_the_default_never_the_benchmarks_batch(
    tiny_model: Path, tmp_path: Path
) -> None:
    source = BundleSource(
        name="tiny",
        model_path=tiny_model,
        info=inspect_model(tiny_model),
        batch_sizes=[1],  # benchmarked at batch 1 only (the latency run)
        coreml_precisions=[],
    )
    with zipfile.ZipFile(write_bundle(source, tmp_path / "bundle.zip").path) as bundle:
        config = parse_pbtxt(bundle.read("triton/tiny/config.pbtxt").decode())
        pipeline = json.loads(bundle.read("pipeline.json"))
        manifest = json.loads(bundle.read("manifest.json"))

    assert config["max_batch_size"] == 8 and config["instance_group"][0]["count"] == 1
    assert config["dynamic_batching"]["preferred_batch_size"] == [4, 8]
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 2000
    assert pipeline["serving"]["source"] == "default"
    assert manifest["serving"].startswith("default: no batching measurement yet")


def test_a_model_without_a_batch_dim_is_served_without_batching(tmp_path: Path) -> None:
    fixed = tmp_path / "fixed4.onnx"
    onnx.save(
        helper.make_model(
            helper.make_graph(
                [helper.make_node("Relu", ["x"], ["y"])],
                "g",
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])],
            ),
            opset_imports=[helper.make_opsetid("", 17)],
        ),
        fixed,
    )
    serving = BatchingSettings(max_batch_size=8, instances=3).model_dump(mode="json")

    with bundle_of(fixed, tmp_path, serving) as bundle:
        config = parse_pbtxt(bundle.read("triton/tiny/config.pbtxt").decode())
        pipeline = json.loads(bundle.read("pipeline.json"))

    assert config["max_batch_size"] == 0 and "dynamic_batching" not in config
    assert config["instance_group"][0]["count"] == 3
    assert config["input"][0]["dims"] == [4, 3]  # declared as it is, its batch included
    assert "fixed first dimension of 4" in pipeline["triton_served"]
