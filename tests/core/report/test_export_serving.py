"""The bundle carries the batching settings a Verify measured: Triton's dynamic batcher and
instance_group count, and pipeline.json's "serving"."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

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


def test_without_a_verify_the_bundle_serves_one_instance_at_the_measured_sizes(
    tiny_model: Path, tmp_path: Path
) -> None:
    with bundle_of(tiny_model, tmp_path, None) as bundle:
        config = parse_pbtxt(bundle.read("triton/tiny/config.pbtxt").decode())
        pipeline = json.loads(bundle.read("pipeline.json"))

    assert config["instance_group"][0]["count"] == 1 and config["max_batch_size"] == 8
    assert pipeline["serving"] is None
