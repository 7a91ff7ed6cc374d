"""The profile and soak jobs: diagnostics of the job's model, written to the job's result JSON."""

from __future__ import annotations

import shutil
from pathlib import Path

from optistudio.core.data.datasets import open_dataset
from optistudio.core.diagnose.diagnostics import DiagnosticsReport, diagnose
from optistudio.core.errors import InvalidSpec
from optistudio.core.measure.soak import SoakReport, SoakSpec, soak
from optistudio.db.models import Job
from optistudio.db.queries import get_model
from optistudio.db.session import rerun_if_lost
from optistudio.services.artifact_store import local_data_file
from optistudio.services.jobkinds import OperatorProfileJobSpec
from optistudio.services.jobresults import OperatorProfileJobResult
from optistudio.services.settings import get_settings
from optistudio.workers.artifacts import model_of, stored_file
from optistudio.workers.jobs import JobContext
from optistudio.workers.outcome import Done


def operator_profile_job(
    job: Job, spec: OperatorProfileJobSpec, context: JobContext
) -> Done[OperatorProfileJobResult]:
    """Profile the job's model (and its variant): per-op times, comparison, INT8 explainer."""
    model_path, info = model_of(job)
    variant_path, variant_name = _variant(spec, context)
    data = (  # through the artifact store: a worker on another machine fetches it once
        open_dataset(local_data_file(spec.data_path), info.inputs) if spec.data_path else None
    )
    work_dir = get_settings().artifact_dir / "jobs" / str(job.id)
    shutil.rmtree(work_dir, ignore_errors=True)  # a redelivered job starts clean
    try:
        report = diagnose(
            model_path,
            spec,
            work_dir=work_dir,
            variant=variant_path,
            data=data,
            images=spec.images_path,
            names=(job.model.name if job.model else model_path.name, variant_name),
            progress=context.progress,
        )
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    result = OperatorProfileJobResult.model_validate(
        report.model_dump()
        | {"variant_model_id": spec.variant_model_id, "variant_name": variant_name}
    )
    return Done(profile_summary(report), result, environment=report.profile.environment)


def soak_job(job: Job, spec: SoakSpec, context: JobContext) -> Done[SoakReport]:
    """Run the job's model for a while and test its memory for growth."""
    model_path, info = model_of(job)
    report = soak(model_path, spec, info=info, progress=context.progress)
    return Done(soak_summary(report), report, environment=report.environment)


def _variant(spec: OperatorProfileJobSpec, context: JobContext) -> tuple[Path | None, str]:
    if spec.variant_model_id is None:
        return None, ""
    variant = rerun_if_lost(context.factory, lambda s: get_model(s, model_id=spec.variant_model_id))
    if variant is None:
        raise InvalidSpec(f"Model #{spec.variant_model_id} (the variant) does not exist any more.")
    path, _ = stored_file(variant)
    return path, variant.name


def profile_summary(report: DiagnosticsReport) -> str:
    """One line: the slowest op type, the variant's ratio, the top finding."""
    top = report.profile.op_types[0] if report.profile.op_types else None
    text = f"{report.profile.plain_ms:.3f} ms per inference"
    if top is not None:
        text += f"; {top.op_type} takes {top.share:.0%}"
    if report.comparison is not None:
        text += f"; the variant takes x{report.comparison.ratio:.2f} the time"
    if report.findings:
        text += f". First finding: {report.findings[0].title}"
    return text + "."


def soak_summary(report: SoakReport) -> str:
    return report.sentence
