"""The batching tuner's jobs: a latency profile per batch size (with the runtime's hand-back
time per batch under load), and a measured verification run.

Both store their figures as the job's result; the studio simulates from the profile.
"""

from __future__ import annotations

import numpy as np

from optistudio.core.backends import SessionOptions
from optistudio.core.batching.loadgen import LoadRun
from optistudio.core.batching.profile import measure_profile
from optistudio.core.batching.results import p99_halves
from optistudio.core.batching.specs import BatchingProfileSpec, BatchingVerifySpec
from optistudio.core.batching.trace import handoff_ms, runner_summary
from optistudio.core.batching.verify import measure_load
from optistudio.db.models import Job
from optistudio.services.jobresults import (
    BatchingProfileJobResult,
    BatchingVerifyJobResult,
    RequestSamples,
    VerifyBatches,
)
from optistudio.workers.artifacts import model_of
from optistudio.workers.jobs import JobContext
from optistudio.workers.outcome import Done

SAMPLE_POINTS = 2000
"""Most per-request rows kept in a verification result (evenly spaced), for the charts."""


def profile_job(
    job: Job, spec: BatchingProfileSpec, context: JobContext
) -> Done[BatchingProfileJobResult]:
    """Time the job's model at each batch size."""
    model_path, _ = model_of(job)
    profile = measure_profile(
        model_path,
        max_batch_size=spec.max_batch_size,
        backend=spec.backend,
        options=SessionOptions(device=spec.device, threads=spec.threads, spin_wait=spec.spin_wait),
        shapes=spec.shapes,
        min_seconds=spec.min_seconds,
        progress=context.progress,
        dims=spec.dims,
        values=spec.values,
        inputs_file=spec.inputs_file,
    )
    ceiling, best = profile.ceiling(spec.max_batch_size)
    result = BatchingProfileJobResult(profile=profile, ceiling=ceiling, best_batch=best)
    handoff = "" if profile.handoff_ms is None else f"; {profile.handoff_ms:.2f} ms hand-back"
    message = (
        f"Timed batch sizes {profile.batch_sizes}: up to {ceiling:.1f} req/s per instance "
        f"at batch {best}{handoff}."
    )
    return Done(message, result, environment=profile.environment)


def verify_job(
    job: Job, spec: BatchingVerifySpec, context: JobContext
) -> Done[BatchingVerifyJobResult]:
    """Serve the job's model with the batching settings under load and measure."""
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
        dims=spec.dims,
        values=spec.values,
        inputs_file=spec.inputs_file,
    )
    result = BatchingVerifyJobResult(
        measured=run.result,
        requests=_samples(run),
        errors=run.errors,
        p99_halves_ms=p99_halves(run.latency_ms),
        batches=VerifyBatches(
            runner=runner_summary(run.batches), handoff_ms=handoff_ms(run.batches)
        ),
    )
    measured = run.result
    message = (
        f"Measured {measured.throughput:.1f} req/s, p50 {measured.p50_ms:.1f} ms, "
        f"p99 {measured.p99_ms:.1f} ms, mean batch {measured.mean_batch_size:.2f}."
    )
    return Done(message, result)


def _samples(run: LoadRun) -> RequestSamples:
    keep = np.linspace(0, len(run.latency_ms) - 1, min(SAMPLE_POINTS, len(run.latency_ms)))
    index = np.unique(keep.astype(int))
    columns = {
        "sent_ms": run.sent_ms,
        "queue_ms": run.queue_ms,
        "compute_ms": run.compute_ms,
        "latency_ms": run.latency_ms,
    }
    return RequestSamples.model_validate(
        {name: [round(values[i], 3) for i in index] for name, values in columns.items()}
    )
