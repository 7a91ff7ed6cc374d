"""Each job kind's work function, registered against its entry of the job-kind table.

`optistudio.services.jobkinds` declares the kinds (spec, result, label, target); this is where
each gets the function that does it. A new kind: its entry there, its function here.
"""

from __future__ import annotations

from typing import Any

from optistudio.db.models import JobKind
from optistudio.services.jobkinds import (
    BATCHING_VERIFY,
    BENCHMARK,
    COMPARE,
    EXPORT,
    LATENCY_PROFILE,
    OPERATOR_PROFILE,
    OPTIMIZE,
    SOAK,
    VIDEO,
)
from optistudio.workers import batching_jobs, diagnostics_jobs
from optistudio.workers.export_job import export_job
from optistudio.workers.jobs import Work
from optistudio.workers.measure_jobs import benchmark_job, compare_job
from optistudio.workers.optimize_job import optimize_job
from optistudio.workers.outcome import JobWork, ModelWork
from optistudio.workers.video_job import video_job

REGISTERED: tuple[JobWork[Any, Any] | ModelWork[Any, Any], ...] = (
    JobWork(BENCHMARK, benchmark_job),
    JobWork(COMPARE, compare_job),
    JobWork(OPTIMIZE, optimize_job),
    JobWork(OPERATOR_PROFILE, diagnostics_jobs.operator_profile_job),
    JobWork(SOAK, diagnostics_jobs.soak_job),
    ModelWork(LATENCY_PROFILE, batching_jobs.latency_profile_job),
    ModelWork(BATCHING_VERIFY, batching_jobs.verify_job),
    JobWork(EXPORT, export_job),
    JobWork(VIDEO, video_job),
)

WORK_OF_KIND: dict[JobKind, Work] = {work.info.kind: work for work in REGISTERED}
"""What a worker runs for each job kind (tests check it covers every kind once)."""


def work_of(kind: JobKind) -> Work:
    """The work function of a kind, as `run_job` takes it."""
    return WORK_OF_KIND[kind]
