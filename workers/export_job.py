"""The export job: a deployable zip bundle of the job's model, in the job's artifact folder."""

from __future__ import annotations

from optistudio.core.errors import InvalidSpec
from optistudio.core.report.bundle import safe_name, write_bundle
from optistudio.db.models import Job, JobKind
from optistudio.db.queries import set_job_result
from optistudio.db.session import transaction
from optistudio.workers.app import TASK_EXPORT, app
from optistudio.workers.jobs import JobContext, run_job
from optistudio.workers.tasks import session_factory

from optistudio.services.bundles import bundle_source
from optistudio.services.jobspecs import parse_job_spec
from optistudio.services.settings import get_settings


@app.task(name=TASK_EXPORT, bind=True)
def export(self, job_id: int) -> None:  # type: ignore[no-untyped-def]
    """Write the bundle of the job's model (model, recipe, reports, Triton, OpenVINO IR)."""
    worker = self.request.hostname or "local"
    run_job(session_factory(), job_id, worker=worker, task_id=self.request.id, work=export_job)


def export_job(job: Job, context: JobContext) -> tuple[str, int | None]:
    parse_job_spec(JobKind.export, job.spec)
    if job.model_id is None:
        raise InvalidSpec(f"Job {job.id} has no model to export.")
    settings = get_settings()
    source = bundle_source(context.factory, settings, job.model_id)
    out = settings.artifact_dir / "jobs" / str(job.id) / f"{safe_name(source.name)}.zip"
    report = write_bundle(source, out, progress=context.progress)
    result = {
        "bundle": str(report.path),
        "size_bytes": report.path.stat().st_size,
        "files": len(report.files),
        "skipped": report.skipped,
    }
    with transaction(context.factory) as s:
        set_job_result(s, job_id=job.id, result=result)
    left_out = f" Not included: {', '.join(report.skipped)}." if report.skipped else ""
    return (
        f"Bundle written: {result['files']} files, {result['size_bytes']:,} bytes.{left_out}",
        None,
    )
