"""Targets the workers offer, and backends side by side with their output checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from optistudio.core.backends import get_backend
from optistudio.core.backends.inventory import hardware_inventory
from optistudio.core.measure.benchmark import BenchmarkSpec, run_benchmark
from optistudio.core.model.info import ModelInfo
from optistudio.db.models import JobKind, JobStatus
from optistudio.db.queries import claim_job, create_job, finish_job, record_worker
from optistudio.db.session import transaction
from optistudio.services.catalog import add_model_file
from optistudio.studio.results_services import results_frame, side_by_side
from optistudio.studio.routing import live_targets
from optistudio.workers.measure_jobs import record_benchmark

QUICK = {
    "batch_sizes": [1, 2],
    "warmup_runs": 1,
    "min_runs": 3,
    "min_seconds": 0.0,
    "max_seconds": 0.3,
}


def stored_run(db_factory, model_id: int, model: Path, spec: BenchmarkSpec) -> int:
    """A benchmark job measured for real and recorded exactly as the worker records it."""
    with transaction(db_factory) as s:
        job_id = create_job(s, kind=JobKind.benchmark, spec=spec.model_dump(), model_id=model_id).id
        claim_job(s, job_id=job_id, worker="w", task_id="t")
    message, _ = record_benchmark(db_factory, job_id, run_benchmark(model, spec))
    with transaction(db_factory) as s:
        finish_job(s, job_id=job_id, status=JobStatus.succeeded, message=message)
    return job_id


@pytest.mark.skipif(not get_backend("openvino").availability().ok, reason="needs OpenVINO")
def test_side_by_side_has_one_row_per_target_with_its_output_check(
    db_factory, app_settings, tiny_model
) -> None:
    model_id = add_model_file(db_factory, app_settings, tiny_model, name="tiny").model_id
    stored_run(db_factory, model_id, tiny_model, BenchmarkSpec(**QUICK))
    stored_run(db_factory, model_id, tiny_model, BenchmarkSpec(backend="openvino", **QUICK))
    newest = stored_run(
        db_factory, model_id, tiny_model, BenchmarkSpec(backend="openvino", **QUICK)
    )

    wide = results_frame(db_factory, model_id=model_id)
    assert set(wide["precision"]) == {"fp32"} and set(wide["device"]) == {"cpu"}
    table = side_by_side(wide)
    rows = {row["target"]: row for row in table.to_dict("records")}
    assert set(rows) == {"onnxruntime · cpu · fp32", "openvino · cpu · fp32"}
    assert rows["onnxruntime · cpu · fp32"]["outputs vs ORT FP32 CPU"] == "reference"
    assert rows["openvino · cpu · fp32"]["outputs vs ORT FP32 CPU"].startswith(
        "agree within the FP32 rule"
    )
    assert rows["openvino · cpu · fp32"]["job"] == newest  # the latest run of a target


def test_live_targets_come_from_live_workers_and_skip_int8_for_fp32_models(
    db_factory, tiny_model
) -> None:
    from optistudio.core.model.intake import inspect_model

    assert live_targets(db_factory, max_age_s=60) == []
    with transaction(db_factory) as s:
        record_worker(s, hostname="cpu@here", queues=["cpu"], inventory=hardware_inventory())
    info: ModelInfo = inspect_model(tiny_model)
    found = live_targets(db_factory, max_age_s=60, info=info)
    assert found[0] == ("onnxruntime", "cpu", "fp32")
    assert all(precision != "int8" for _, _, precision in found)
    assert ("onnxruntime", "cpu", "int8") in live_targets(db_factory, max_age_s=60)
