"""The batching tuner's jobs: a latency profile per batch size (with the runtime's hand-back
time per batch under load; a decoder's decode steps instead, optistudio.workers.batching_decoder),
and a measured verification run.

Both store their figures as the job's result; the studio simulates from the profile. A Verify
also checks and refits the profile by the policy in optistudio.core.batching.verify_policy
(predict before, refit after, adopt unless saturated): this module only fetches the rows it
needs and stores the calibrated profile in the result, where the next Verify and the page take
it up.
"""

from __future__ import annotations

import numpy as np
from sqlalchemy.orm import Session

from optistudio.core.batching import verify_policy
from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.latency_profile import measure_latency_profile
from optistudio.core.batching.loadgen import LoadRun
from optistudio.core.batching.results import p99_halves
from optistudio.core.batching.specs import BatchingVerifySpec, LatencyProfileSpec
from optistudio.core.batching.trace import handoff_ms, runner_summary
from optistudio.core.batching.verify import measure_load
from optistudio.core.batching.verify_policy import VerifyPrediction
from optistudio.core.llm.folder import is_decoder_file
from optistudio.db.models import Job, JobKind
from optistudio.db.queries import finished_jobs
from optistudio.db.session import rerun_if_lost
from optistudio.services.jobkinds import BATCHING_VERIFY, LATENCY_PROFILE
from optistudio.services.jobresults import (
    BatchingVerifyJobResult,
    LatencyProfileJobResult,
    RequestSamples,
    VerifyBatches,
)
from optistudio.workers.artifacts import JobModel
from optistudio.workers.batching_decoder import decode_profile_job
from optistudio.workers.jobs import JobContext
from optistudio.workers.outcome import Done

SAMPLE_POINTS = 2000
"""Most per-request rows kept in a verification result (evenly spaced), for the charts."""
LOOKBACK = 200
"""Finished jobs of a kind searched for the profile in use."""


def latency_profile_job(
    job: Job, spec: LatencyProfileSpec, model: JobModel, context: JobContext
) -> Done[LatencyProfileJobResult]:
    """Time the job's model at each batch size (a decoder: its decode steps and prefills), on
    its card as the worker read it."""
    if is_decoder_file(model.path):
        return decode_profile_job(model.path, spec, context)
    profile = measure_latency_profile(
        model.path,
        info=model.info,
        max_batch_size=spec.max_batch_size,
        target=spec.run_target,
        inputs=spec.model_inputs,
        min_seconds=spec.min_seconds,
        progress=context.progress,
        probe_time_scale=spec.probe_time_scale,
    )
    ceiling, best = profile.ceiling(spec.max_batch_size)
    result = LatencyProfileJobResult(profile=profile, ceiling=ceiling, best_batch=best)
    handoff = "" if profile.handoff_ms is None else f"; {profile.handoff_ms:.2f} ms hand-back"
    message = (
        f"Timed batch sizes {profile.batch_sizes}: up to {ceiling:.1f} req/s per instance "
        f"at batch {best}{handoff}.{instances_line(profile, spec.max_batch_size)}"
    )
    if profile.batch_refused:
        message += f" Served at batch 1 only: {profile.batch_refused}"
    if profile.unmeasured:  # what the predictions leave out, and why
        message += f" {profile.unmeasured_note()}"
    if profile.batched_rewrite:
        message += f" {profile.batched_rewrite}"
    for note in (profile.quick_note(), profile.pace_note()):
        if note:
            message += f" {note}"
    return Done(message, result, environment=profile.environment)


def verify_job(
    job: Job, spec: BatchingVerifySpec, model: JobModel, context: JobContext
) -> Done[BatchingVerifyJobResult]:
    """Predict the run from the profile in use, serve the job's model with the batching
    settings under load and measure, then refit the profile from the run's batches."""
    in_use = profile_in_use(context, job, spec)
    before = verify_policy.predict_before(spec, *in_use) if in_use else None
    context.progress(0.0, f"serving for {spec.seconds:g} s")
    run = measure_load(
        model.path,
        spec.settings,
        rate=spec.rate,
        process=spec.process,
        clients=spec.clients,
        seconds=spec.seconds,
        target=spec.run_target,
        inputs=spec.model_inputs,
        seed=spec.seed,
    )
    prediction = (
        verify_policy.refit_after(spec, run, before, *in_use, verify=f"Verify #{job.id}")
        if in_use and before
        else None
    )
    result = BatchingVerifyJobResult(
        measured=run.result,
        requests=request_samples(run),
        errors=run.errors,
        p99_halves_ms=p99_halves(run.latency_ms),
        batches=VerifyBatches(
            runner=runner_summary(run.batches), handoff_ms=handoff_ms(run.batches)
        ),
        prediction=prediction,
    )
    measured = run.result
    served = spec.settings.instances
    message = (
        f"Measured on {served} instance{'s' if served > 1 else ''}: "
        f"{measured.throughput:.1f} req/s, p50 {measured.p50_ms:.1f} ms, "
        f"p99 {measured.p99_ms:.1f} ms, mean batch {measured.mean_batch_size:.2f}."
    )
    if run.note:
        message += f" {run.note}"
    if prediction is not None:
        point = prediction.on_arrivals or prediction.predicted
        band = prediction.arrivals_band or prediction.band
        where = "inside" if band.holds_p99(measured.p99_ms) else "outside"
        message += (
            f" Predicted p99 {point.p99_ms:.1f} ms "
            f"(band {band.p99_low_ms:.1f}-{band.p99_high_ms:.1f}): measured {where}; "
            + (
                "profile not recalibrated (saturated run)."
                if prediction.not_adopted
                else "profile recalibrated."
            )
        )
    return Done(message, result)


def profile_in_use(
    context: JobContext, job: Job, spec: BatchingVerifySpec
) -> tuple[int, LatencyProfile] | None:
    """The profile job this run checks (the spec's, else the model's newest succeeded one) and
    its profile in use (`verify_policy.profile_in_use`: as refitted by the newest earlier
    Verify of it); None without a profile job, or when it holds a decoder's decode profile."""

    def read(s: Session) -> tuple[Job, list[tuple[int, VerifyPrediction | None]]] | None:
        profiles = [
            row
            for row in finished_jobs(s, kind=JobKind.latency_profile, limit=LOOKBACK)
            if row.model_id == job.model_id and spec.profile_job in (None, row.id)
        ]
        if not profiles:
            return None
        verifies = [
            (row.id, earlier.prediction if earlier else None)
            for row in finished_jobs(s, kind=JobKind.batching_verify, limit=LOOKBACK)
            if row.model_id == job.model_id
            for earlier in [BATCHING_VERIFY.read_result(row.result)]
        ]
        return profiles[0], verifies

    found = rerun_if_lost(context.factory, read)
    if found is None:
        return None
    source, verifies = found
    measured = LATENCY_PROFILE.parse_result(source.result).profile
    if measured is None:  # a decoder's decode profile: nothing the request pipeline predicts
        return None
    profile, _ = verify_policy.profile_in_use(source.id, measured, verifies, before_job=job.id)
    return source.id, profile


def instances_line(profile: LatencyProfile, max_batch_size: int) -> str:
    """' On 2 instances at once: each 1.62x as slow at batch 8, up to 98.0 req/s in all.'
    per instance count the profile measured past one; '' without any."""
    parts = []
    for row in profile.instance_latency:
        top, best = profile.ceiling(max_batch_size, instances=row.instances)
        slowdown = (
            row.slowdown[profile.batch_sizes.index(best)] if best in profile.batch_sizes else None
        )
        slower = f"each {slowdown:.2f}x as slow at batch {best}, " if slowdown else ""
        parts.append(
            f"on {row.instances} instances at once ({row.threads} thread(s) each): {slower}"
            f"up to {top:.1f} req/s in all"
        )
    text = "; ".join(parts)
    return f" {text[0].upper()}{text[1:]}." if parts else ""


def request_samples(run: LoadRun) -> RequestSamples:
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
