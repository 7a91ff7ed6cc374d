"""The export job, as a worker runs it: the bundle lands in the job's folder, checksums hold."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from optistudio.core.report.bundle import verify_bundle
from optistudio.db.models import JobKind, JobStatus
from optistudio.db.queries import create_job, get_job
from optistudio.db.session import transaction
from optistudio.services.catalog import add_model_file
from optistudio.services.jobkinds import EXPORT
from optistudio.studio.compare_services import export_rows, submit_export
from optistudio.workers.jobs import run_job
from optistudio.workers.work import work_of

export_job = work_of(JobKind.export)


def test_export_job_writes_a_verified_bundle(db_factory, app_settings, tiny_model: Path) -> None:
    model_id = add_model_file(db_factory, app_settings, tiny_model, name="tiny").model_id
    sent: list[tuple[str, list[int]]] = []
    job_id = submit_export(
        db_factory, model_id=model_id, send=lambda name, args: sent.append((name, args)) or "t1"
    )
    assert sent == [("optistudio.export", [job_id])]

    run_job(db_factory, job_id, worker="test", task_id="t1", work=export_job)

    with transaction(db_factory) as s:
        job = get_job(s, job_id=job_id)
        assert job is not None and job.status == JobStatus.succeeded, job and job.message
        result = EXPORT.parse_result(job.result or {})
    bundle = Path(result.bundle)
    assert bundle.parent == app_settings.artifact_dir / "jobs" / str(job_id)
    assert verify_bundle(bundle) == []
    assert "tensorrt" in result.skipped
    assert export_rows(db_factory)[0]["bundle"] == str(bundle)
    with zipfile.ZipFile(bundle) as archive:
        served = json.loads(archive.read("pipeline.json"))
    # The server learns the shapes the model was measured at (tiny: [batch, 16] at batch 1).
    assert served["input_profile"]["shapes"] == {"x": [1, 16]}
    assert served["input_profile"]["batch_axes"] == {"x": 0}


def test_export_of_a_deleted_model_fails_with_a_reason(db_factory) -> None:
    with transaction(db_factory) as s:
        job_id = create_job(s, kind=JobKind.export, spec={}, model_id=None).id
    run_job(db_factory, job_id, worker="test", task_id=None, work=export_job)
    with transaction(db_factory) as s:
        job = get_job(s, job_id=job_id)
        assert job is not None and job.status == JobStatus.failed
        assert "has no model to export" in job.message
