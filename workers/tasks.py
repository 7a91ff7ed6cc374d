"""Thin Celery tasks: each takes a job id and hands the work to core."""

from __future__ import annotations

import json
from functools import lru_cache

from optistudio.core.errors import InvalidSpec
from optistudio.core.measure.benchmark import BenchmarkReport, BenchmarkSpec, run_benchmark
from optistudio.core.measure.compare import compare_models, describe
from optistudio.db.models import Job, JobKind, Model
from optistudio.db.queries import (
    MeasurementRow,
    get_model,
    get_or_create_environment,
    replace_measurements,
    set_job_result,
)
from optistudio.db.session import make_session_factory, transaction
from optistudio.workers.app import TASK_BENCHMARK, TASK_COMPARE, TASK_OPTIMIZE, app
from optistudio.workers.artifacts import model_of, stored_file
from optistudio.workers.jobs import JobContext, run_job
from sqlalchemy.orm import Session, sessionmaker

from optistudio.services.jobspecs import CompareJobSpec, parse_job_spec
from optistudio.services.settings import get_settings


@lru_cache(maxsize=1)
def session_factory() -> sessionmaker[Session]:
    return make_session_factory(get_settings().database_url)


@app.task(name=TASK_BENCHMARK, bind=True)
def benchmark(self, job_id: int) -> None:  # type: ignore[no-untyped-def]
    """Benchmark the job's model as its spec says and store one row per metric."""
    worker = self.request.hostname or "local"
    run_job(session_factory(), job_id, worker=worker, task_id=self.request.id, work=benchmark_job)


@app.task(name=TASK_COMPARE, bind=True)
def compare(self, job_id: int) -> None:  # type: ignore[no-untyped-def]
    """Compare the job's model (A) with its candidate (B), interleaved, and store the ratio."""
    worker = self.request.hostname or "local"
    run_job(session_factory(), job_id, worker=worker, task_id=self.request.id, work=compare_job)


@app.task(name=TASK_OPTIMIZE, bind=True)
def optimize(self, job_id: int) -> None:  # type: ignore[no-untyped-def]
    """Make the job's recipes into variants, check their accuracy and time them."""
    from optistudio.workers.optimize_task import optimize_job

    worker = self.request.hostname or "local"
    run_job(session_factory(), job_id, worker=worker, task_id=self.request.id, work=optimize_job)


def benchmark_job(job: Job, context: JobContext) -> tuple[str, int | None]:
    spec: BenchmarkSpec = parse_job_spec(JobKind.benchmark, job.spec)
    model_path, info = model_of(job)
    report = run_benchmark(model_path, spec, info=info, progress=context.progress)
    return record_benchmark(context.factory, job.id, report)


def compare_job(job: Job, context: JobContext) -> tuple[str, int | None]:
    spec: CompareJobSpec = parse_job_spec(JobKind.compare, job.spec)
    path_a, info_a = model_of(job)
    with transaction(context.factory) as s:
        candidate = get_model(s, model_id=spec.candidate_model_id)
    if candidate is None:
        raise InvalidSpec(f"Model #{spec.candidate_model_id} (B) does not exist any more.")
    path_b, info_b = stored_file(candidate)
    comparison = compare_models(
        path_a,
        path_b,
        spec.comparison(),
        info_a=info_a,
        info_b=info_b,
        progress=context.progress,
    )
    sentence = describe(comparison.interval(), a=_label(job.model), b=_label(candidate))
    result = comparison.model_dump(mode="json") | {
        "sentence": sentence,
        "candidate_model_id": candidate.id,
        "candidate_name": candidate.name,
    }
    with transaction(context.factory) as s:
        environment = get_or_create_environment(s, data=comparison.environment)
        set_job_result(s, job_id=job.id, result=result)
        environment_id = environment.id
    return sentence, environment_id


def record_benchmark(
    factory: sessionmaker[Session], job_id: int, report: BenchmarkReport
) -> tuple[str, int]:
    """Store a report's measurements (replacing any from an earlier attempt) and environment."""
    rows = [MeasurementRow(*row) for row in report.measurement_rows()]
    check = report.output_check
    result = {
        "target": {
            "backend": report.spec.backend,
            "device": report.spec.device,
            "precision": report.spec.precision,
            "execution_provider": report.spec.execution_provider,
        },
        "output_check": check.model_dump(mode="json") if check else None,
        "runtime": json.loads(json.dumps(report.runtime_details, default=str)),
        "warnings": report.warnings,
    }
    with transaction(factory) as s:
        environment = get_or_create_environment(s, data=report.environment)
        replace_measurements(s, job_id=job_id, rows=rows)
        set_job_result(s, job_id=job_id, result=result)
        environment_id = environment.id
    batches = ", ".join(str(r.batch_size) for r in report.results)
    unstable = [str(r.batch_size) for r in report.results if not r.stable]
    contended = [str(r.batch_size) for r in report.results if r.contention.contended]
    note = f" Unstable at batch {', '.join(unstable)}." if unstable else ""
    if contended:
        note += f" Other processes competed for the CPU at batch {', '.join(contended)}."
    if check is not None and not check.passed:
        note += f" Outputs disagree with the reference: {'; '.join(check.problems)}."
    return f"Measured batch sizes {batches}.{note}", environment_id


def _label(model: Model | None) -> str:
    return f"#{model.id} {model.name}" if model else "A"
