"""The profile and soak jobs: diagnostics of the job's model, written to the job's result JSON."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from optistudio.core.data.datasets import open_dataset
from optistudio.core.diagnose.diagnostics import DiagnosticsReport, diagnose
from optistudio.core.errors import InvalidSpec
from optistudio.core.measure.soak import SoakReport, SoakSpec, soak
from optistudio.db.models import Job, JobKind
from optistudio.db.queries import get_model, get_or_create_environment, set_job_result
from optistudio.db.session import transaction
from optistudio.workers.app import TASK_PROFILE, TASK_SOAK, app
from optistudio.workers.artifacts import model_of, stored_file
from optistudio.workers.jobs import JobContext, run_job
from optistudio.workers.tasks import session_factory

from optistudio.services.artifact_store import local_data_file
from optistudio.services.jobspecs import ProfileJobSpec, parse_job_spec
from optistudio.services.settings import get_settings


@app.task(name=TASK_PROFILE, bind=True)
def profile(self, job_id: int) -> None:  # type: ignore[no-untyped-def]
    """Profile the job's model (and its variant): per-op times, comparison, INT8 explainer."""
    worker = self.request.hostname or "local"
    run_job(session_factory(), job_id, worker=worker, task_id=self.request.id, work=profile_job)


@app.task(name=TASK_SOAK, bind=True)
def soak_task(self, job_id: int) -> None:  # type: ignore[no-untyped-def]
    """Run the job's model for a while and test its memory for growth."""
    worker = self.request.hostname or "local"
    run_job(session_factory(), job_id, worker=worker, task_id=self.request.id, work=soak_job)


def profile_job(job: Job, context: JobContext) -> tuple[str, int | None]:
    spec: ProfileJobSpec = parse_job_spec(JobKind.profile, job.spec)
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
    result = report.model_dump(mode="json") | {
        "variant_model_id": spec.variant_model_id,
        "variant_name": variant_name,
    }
    environment_id = _store(context, job.id, result, report.profile.environment)
    return profile_summary(report), environment_id


def soak_job(job: Job, context: JobContext) -> tuple[str, int | None]:
    spec: SoakSpec = parse_job_spec(JobKind.soak, job.spec)
    model_path, info = model_of(job)
    report = soak(model_path, spec, info=info, progress=context.progress)
    result = report.model_dump(mode="json")
    return soak_summary(report), _store(context, job.id, result, report.environment)


def _variant(spec: ProfileJobSpec, context: JobContext) -> tuple[Path | None, str]:
    if spec.variant_model_id is None:
        return None, ""
    with transaction(context.factory) as s:
        variant = get_model(s, model_id=spec.variant_model_id)
        if variant is None:
            raise InvalidSpec(
                f"Model #{spec.variant_model_id} (the variant) does not exist any more."
            )
        path, _ = stored_file(variant)
        return path, variant.name


def _store(
    context: JobContext, job_id: int, result: dict[str, Any], environment: dict[str, Any]
) -> int:
    with transaction(context.factory) as s:
        stored = get_or_create_environment(s, data=environment)
        set_job_result(s, job_id=job_id, result=result)
        return stored.id


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
