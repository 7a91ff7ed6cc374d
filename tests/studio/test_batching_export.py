"""The Batching page's export without Streamlit: the settings a Verify measured, for our
runtime and for Triton."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from optistudio.core.batching.pipeline_file import parse_pipeline
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.specs import LatencyProfileSpec
from optistudio.core.batching.triton import parse_pbtxt
from optistudio.core.model.intake import inspect_model
from optistudio.studio import batching_export as export
from optistudio.studio.job_view import JobView

SERVED = LatencyProfileSpec(backend="onnxruntime")


def test_exports_for_our_runtime_and_triton(tiny_model: Path) -> None:
    settings = BatchingSettings(max_batch_size=8, timeout_ms=2.5, instances=2)
    info = inspect_model(tiny_model)
    serving = export.verified_serving(settings, [])

    document = parse_pipeline(export.pipeline_json("tiny.onnx", info, SERVED, serving))
    config = parse_pbtxt(export.triton_text("tiny v2.onnx", info, settings))

    assert document.batching() == settings
    assert (document.name, document.model) == ("tiny", "tiny.onnx")
    assert config["name"] == "tiny_v2"
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 2500
    assert config["instance_group"][0]["count"] == 2


def verify_row(job: int, status: str = "succeeded", spec: dict[str, Any] | None = None) -> JobView:
    measured = SimpleNamespace(throughput=88.0, p99_ms=140.0)
    result = SimpleNamespace(measured=measured)
    return JobView(id=job, kind="Verify", status=status, spec=spec or {}, result=result)


def test_the_export_carries_the_instances_verify_measured(tiny_model: Path) -> None:
    sliders = BatchingSettings(max_batch_size=8, timeout_ms=2)
    verified = BatchingSettings(max_batch_size=4, timeout_ms=5, instances=2)
    stored = {"settings": verified.model_dump(mode="json")}
    jobs = [verify_row(13, "failed"), verify_row(12, spec=stored), verify_row(9)]

    serving = export.verified_serving(sliders, jobs)
    info = inspect_model(tiny_model)
    config = parse_pbtxt(export.triton_text("tiny", info, serving.batching()))
    document = json.loads(export.pipeline_json("tiny", info, SERVED, serving))

    assert serving.batching() == verified
    assert "Verify job #12" in serving.note and "2 instance(s)" in serving.note
    assert config["instance_group"][0]["count"] == 2
    assert document["serving"]["instances"] == 2
    assert (document["serving"]["source"], document["serving"]["verify_job"]) == ("verified", 12)


def test_without_a_verify_the_export_is_the_sliders() -> None:
    sliders = BatchingSettings(max_batch_size=8, timeout_ms=2, instances=2)

    serving = export.verified_serving(sliders, [verify_row(3, "running")])

    assert serving.batching() == sliders and serving.note.startswith("Not verified yet")
    assert serving.source == "sliders" and serving.verify_job is None
