"""Thin Celery tasks: each takes a job id and hands the work to core."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker

from core.benchmark import BenchmarkReport, BenchmarkSpec, run_benchmark
from core.errors import InvalidSpec, ModelRejected
from core.model_info import ModelInfo
from db.models import Job
from db.queries import MeasurementRow, get_or_create_environment, replace_measurements
from db.session import make_session_factory, transaction
from optistudio.settings import get_settings
from workers.app import TASK_BENCHMARK, app
from workers.jobs import JobContext, run_job


@lru_cache(maxsize=1)
def session_factory() -> sessionmaker[Session]:
    return make_session_factory(get_settings().database_url)


@app.task(name=TASK_BENCHMARK, bind=True)
def benchmark(self, job_id: int) -> None:  # type: ignore[no-untyped-def]
    """Benchmark the job's model as its spec says and store one row per metric."""
    worker = self.request.hostname or "local"
    run_job(session_factory(), job_id, worker=worker, task_id=self.request.id, work=benchmark_job)


def benchmark_job(job: Job, context: JobContext) -> tuple[str, int | None]:
    spec = parse_spec(job.spec)
    model_path, info = model_of(job)
    report = run_benchmark(model_path, spec, info=info, progress=context.progress)
    return record_benchmark(context.factory, job.id, report)


def record_benchmark(
    factory: sessionmaker[Session], job_id: int, report: BenchmarkReport
) -> tuple[str, int]:
    """Store a report's measurements (replacing any from an earlier attempt) and environment."""
    rows = [MeasurementRow(*row) for row in report.measurement_rows()]
    with transaction(factory) as s:
        environment = get_or_create_environment(s, data=report.environment)
        replace_measurements(s, job_id=job_id, rows=rows)
        environment_id = environment.id
    batches = ", ".join(str(r.batch_size) for r in report.results)
    unstable = [str(r.batch_size) for r in report.results if not r.stable]
    note = f" Unstable at batch {', '.join(unstable)}." if unstable else ""
    return f"Measured batch sizes {batches}.{note}", environment_id


def parse_spec(spec: dict) -> BenchmarkSpec:  # type: ignore[type-arg]
    try:
        return BenchmarkSpec.model_validate(spec)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise InvalidSpec(f"The benchmark settings are invalid: {problems}") from exc


def model_of(job: Job) -> tuple[Path, ModelInfo]:
    if job.model is None:
        raise InvalidSpec(f"Job {job.id} has no model.")
    path = Path(job.model.path)
    if not path.exists():
        raise ModelRejected(
            f"The stored file of model {job.model.name!r} is missing ({path}).",
            hint="Upload the model again.",
        )
    return path, ModelInfo.model_validate(job.model.info)
