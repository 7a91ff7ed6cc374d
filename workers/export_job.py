"""The export job: a deployable zip bundle of the job's model, in the job's artifact folder."""

from __future__ import annotations

from optistudio.core.backends.coreml_backend import RUNS_ON as CORE_ML_RUNS_ON
from optistudio.core.errors import InvalidSpec
from optistudio.core.report.bundle import safe_name, write_bundle
from optistudio.db.models import Job
from optistudio.services.bundles import bundle_source
from optistudio.services.jobkinds import ExportJobSpec
from optistudio.services.jobresults import ExportJobResult
from optistudio.services.settings import get_settings
from optistudio.workers.jobs import JobContext
from optistudio.workers.outcome import Done


def export_job(job: Job, spec: ExportJobSpec, context: JobContext) -> Done[ExportJobResult]:
    """Write the bundle of the job's model (model, recipe, reports, Triton, OpenVINO IR, Core ML)."""
    if job.model_id is None:
        raise InvalidSpec(f"Job {job.id} has no model to export.")
    settings = get_settings()
    source = bundle_source(context.factory, settings, job.model_id)
    out = settings.artifact_dir / "jobs" / str(job.id) / f"{safe_name(source.name)}.zip"
    report = write_bundle(source, out, progress=context.progress)
    result = ExportJobResult(
        bundle=str(report.path),
        size_bytes=report.path.stat().st_size,
        files=len(report.files),
        skipped=report.skipped,
    )
    left_out = f" Not included: {', '.join(report.skipped)}." if report.skipped else ""
    made_coreml = any(member.startswith("coreml/") for member in report.files)
    where = f" Core ML {CORE_ML_RUNS_ON}: its packages are in coreml/." if made_coreml else ""
    message = f"Bundle written: {result.files} files, {result.size_bytes:,} bytes.{left_out}{where}"
    return Done(message, result)
