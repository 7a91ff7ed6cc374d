"""The batching tuner's jobs: a latency profile per batch size (with the runtime's hand-back
time per batch under load), and a measured verification run.

Both write their figures to the job's `result` JSON; the studio simulates from the profile.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from optistudio.core.backends import SessionOptions
from optistudio.core.batching.loadgen import LoadRun
from optistudio.core.batching.profile import measure_profile
from optistudio.core.batching.results import p99_halves
from optistudio.core.batching.specs import BatchingProfileSpec, BatchingVerifySpec
from optistudio.core.batching.trace import handoff_ms, runner_summary
from optistudio.core.batching.verify import measure_load
from optistudio.db.models import Job, JobKind
from optistudio.db.queries import get_or_create_environment, set_job_result
from optistudio.db.session import transaction
from optistudio.workers.app import TASK_BATCHING_PROFILE, TASK_BATCHING_VERIFY, app
from optistudio.workers.artifacts import model_of
from optistudio.workers.jobs import JobContext, run_job
from optistudio.workers.tasks import session_factory

from optistudio.services.jobspecs import parse_job_spec

SAMPLE_POINTS = 2000
"""Most per-request rows kept in a verification result (evenly spaced), for the charts."""


@app.task(name=TASK_BATCHING_PROFILE, bind=True)
def batching_profile(self, job_id: int) -> None:  # type: ignore[no-untyped-def]
    """Time the job's model at each batch size."""
    worker = self.request.hostname or "local"
    run_job(session_factory(), job_id, worker=worker, task_id=self.request.id, work=profile_job)


@app.task(name=TASK_BATCHING_VERIFY, bind=True)
def batching_verify(self, job_id: int) -> None:  # type: ignore[no-untyped-def]
    """Serve the job's model with the batching settings under load and measure."""
    worker = self.request.hostname or "local"
    run_job(session_factory(), job_id, worker=worker, task_id=self.request.id, work=verify_job)


def profile_job(job: Job, context: JobContext) -> tuple[str, int | None]:
    spec: BatchingProfileSpec = parse_job_spec(JobKind.batching_profile, job.spec)
    model_path, _ = model_of(job)
    profile = measure_profile(
        model_path,
        max_batch_size=spec.max_batch_size,
        backend=spec.backend,
        options=SessionOptions(device=spec.device, threads=spec.threads, spin_wait=spec.spin_wait),
        shapes=spec.shapes,
        min_seconds=spec.min_seconds,
        progress=context.progress,
    )
    ceiling, best = profile.ceiling(spec.max_batch_size)
    result = {"profile": profile.model_dump(mode="json"), "ceiling": ceiling, "best_batch": best}
    environment_id = _store(context, job.id, result, profile.environment)
    handoff = "" if profile.handoff_ms is None else f"; {profile.handoff_ms:.2f} ms hand-back"
    return (
        f"Timed batch sizes {profile.batch_sizes}: up to {ceiling:.1f} req/s per instance "
        f"at batch {best}{handoff}.",
        environment_id,
    )


def verify_job(job: Job, context: JobContext) -> tuple[str, int | None]:
    spec: BatchingVerifySpec = parse_job_spec(JobKind.batching_verify, job.spec)
    model_path, _ = model_of(job)
    context.progress(0.0, f"serving for {spec.seconds:g} s")
    run = measure_load(
        model_path,
        spec.settings,
        rate=spec.rate,
        process=spec.process,
        clients=spec.clients,
        seconds=spec.seconds,
        backend=spec.backend,
        options=SessionOptions(device=spec.device, threads=spec.threads, spin_wait=spec.spin_wait),
        shapes=spec.shapes,
        seed=spec.seed,
    )
    result = {"measured": run.result.model_dump(mode="json"), "requests": _samples(run)}
    result["errors"] = run.errors
    result["p99_halves_ms"] = p99_halves(run.latency_ms)
    result["batches"] = {
        "runner": {str(rows): list(row) for rows, row in runner_summary(run.batches).items()},
        "handoff_ms": handoff_ms(run.batches),
    }
    with transaction(context.factory) as s:
        set_job_result(s, job_id=job.id, result=result)
    measured = run.result
    return (
        f"Measured {measured.throughput:.1f} req/s, p50 {measured.p50_ms:.1f} ms, "
        f"p99 {measured.p99_ms:.1f} ms, mean batch {measured.mean_batch_size:.2f}.",
        None,
    )


def _samples(run: LoadRun) -> dict[str, list[float]]:
    keep = np.linspace(0, len(run.latency_ms) - 1, min(SAMPLE_POINTS, len(run.latency_ms)))
    index = np.unique(keep.astype(int))
    columns = {
        "sent_ms": run.sent_ms,
        "queue_ms": run.queue_ms,
        "compute_ms": run.compute_ms,
        "latency_ms": run.latency_ms,
    }
    return {name: [round(values[i], 3) for i in index] for name, values in columns.items()}


def _store(context: JobContext, job_id: int, result: dict[str, Any], environment: dict) -> int:
    with transaction(context.factory) as s:
        stored = get_or_create_environment(s, data=environment)
        set_job_result(s, job_id=job_id, result=result)
        return stored.id
