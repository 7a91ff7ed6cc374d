"""The export job, as a worker runs it: the bundle lands in the job's folder, checksums hold."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from optistudio.core.report.bundle import verify_bundle
from optistudio.db.models import JobKind, JobStatus
from optistudio.services.jobkinds import EXPORT
from optistudio.studio.compare_services import export_rows, submit_export
from optistudio.workers.work import work_of
from tests.workers.conftest import finished_job, read_job, work_job

export_job = work_of(JobKind.export)


def test_export_job_writes_a_verified_bundle(  # type: ignore[no-untyped-def]
    db_factory, app_settings, store_model, tiny_model: Path
) -> None:
    model_id = store_model(tiny_model, name="tiny")
    sent: list[tuple[str, list[int]]] = []
    job_id = submit_export(
        db_factory, model_id=model_id, send=lambda name, args: sent.append((name, args)) or "t1"
    )
    assert sent == [("optistudio.export", [job_id])]

    work_job(db_factory, job_id, export_job)

    job = read_job(db_factory, job_id)
    assert job is not None and job.status == JobStatus.succeeded, job and job.message
    result = EXPORT.parse_result(job.result or {})
    bundle = Path(result.bundle)
    assert bundle.parent == app_settings.artifact_dir / "jobs" / str(job_id)
    assert verify_bundle(bundle) == []
    assert "tensorrt" in result.skipped
    assert export_rows(db_factory)[0].result.bundle == str(bundle)
    with zipfile.ZipFile(bundle) as archive:
        served = json.loads(archive.read("pipeline.json"))
    # The server learns the shapes the model was measured at (tiny: [batch, 16] at batch 1).
    assert served["input_profile"]["shapes"] == {"x": [1, 16]}
    assert served["input_profile"]["batch_axes"] == {"x": 0}


def test_export_of_a_deleted_model_fails_with_a_reason(db_factory) -> None:
    job = finished_job(db_factory, JobKind.export, None, {})

    assert job is not None and job.status == JobStatus.failed
    assert "has no model to export" in job.message
