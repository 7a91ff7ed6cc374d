"""Many stored results in a browser test's database, quickly, through the job path.

Each model is benchmarked once for real (batch sizes 1, 2, 4, 8); that report is then stored by
`workers.jobs.run_job` on as many benchmark jobs as asked, exactly as `bench --save` stores its
one. The figures are measured, not made up; only their count is multiplied, which is what a
page that lists or reads every stored result has to cope with.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from optistudio.core.measure.benchmark import BenchmarkReport, BenchmarkSpec, run_benchmark
from optistudio.db.models import JobKind
from optistudio.db.queries import create_job
from optistudio.db.selection import result_index
from optistudio.db.session import make_session_factory, transaction
from optistudio.services.catalog import add_model_file
from optistudio.services.settings import Settings
from optistudio.workers.artifacts import model_of
from optistudio.workers.jobs import run_job
from optistudio.workers.measure_jobs import record_benchmark

SPEC = BenchmarkSpec(
    batch_sizes=[1, 2, 4, 8], min_seconds=0.05, max_seconds=0.1, min_runs=5, warmup_runs=1
)
"""Short windows (the pages read how many results there are, not how steady each is): 10 of the
seeding's 16 s were these benchmarks at max_seconds 0.5."""
WORKER = f"seed@{socket.gethostname()}"


def store_results(settings: Settings, models: list[Path], *, jobs_per_model: int) -> int:
    """Store `models` and `jobs_per_model` benchmark jobs of each (one real report per model,
    four results per job); returns how many results the database now lists."""
    factory = make_session_factory(settings.database_url)
    for path in models:
        model_id = add_model_file(factory, settings, path, name=path.stem, origin="cli").model_id
        report = _measure(factory, model_id)
        for _ in range(jobs_per_model - 1):
            _store(factory, model_id, report)
    with transaction(factory) as s:
        return len(result_index(s))


def _measure(factory: Any, model_id: int) -> BenchmarkReport:
    """A real benchmark job of the model; its report."""
    reports: list[BenchmarkReport] = []

    def work(job: Any, context: Any) -> tuple[str, int | None]:
        path, info = model_of(job)
        reports.append(run_benchmark(path, SPEC, info=info))
        return record_benchmark(context.factory, job.id, reports[0])

    run_job(factory, _new_job(factory, model_id), worker=WORKER, task_id=None, work=work)
    return reports[0]


def _store(factory: Any, model_id: int, report: BenchmarkReport) -> None:
    """Another benchmark job of the model that stores `report` as its own."""

    def work(job: Any, context: Any) -> tuple[str, int | None]:
        return record_benchmark(context.factory, job.id, report)

    run_job(factory, _new_job(factory, model_id), worker=WORKER, task_id=None, work=work)


def _new_job(factory: Any, model_id: int) -> int:
    with transaction(factory) as s:
        job = create_job(
            s, kind=JobKind.benchmark, spec=SPEC.model_dump(mode="json"), model_id=model_id
        )
        return job.id
