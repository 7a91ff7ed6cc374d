"""The batching tuner's jobs: a latency profile per batch size (with the runtime's hand-back
time per batch under load), and a measured verification run.

Both store their figures as the job's result; the studio simulates from the profile. A Verify
also checks and refits the profile: before it serves, it predicts its own run (with the band)
from the profile in use, the newest profile job's profile as refitted by the Verify runs since;
after, it refits that profile from its own batches (optistudio.core.batching.recalibrate) and
stores the calibrated profile in its result, where the next Verify and the page take it up.
"""

from __future__ import annotations

import numpy as np

from optistudio.core.backends import SessionOptions
from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.latency_profile import measure_latency_profile
from optistudio.core.batching.loadgen import LoadRun
from optistudio.core.batching.recalibrate import (
    calibration_line,
    recalibrate_at_instances,
    saturated_refit,
)
from optistudio.core.batching.results import Band, LoadResult, p99_halves
from optistudio.core.batching.simulate import simulate, simulate_band
from optistudio.core.batching.specs import BatchingProfileSpec, BatchingVerifySpec
from optistudio.core.batching.trace import handoff_ms, overall_slowdown, runner_summary
from optistudio.core.batching.verify import measure_load
from optistudio.core.errors import InvalidSpec
from optistudio.db.models import Job, JobKind
from optistudio.db.queries import finished_jobs
from optistudio.db.session import transaction
from optistudio.services.jobkinds import BATCHING_PROFILE, BATCHING_VERIFY
from optistudio.services.jobresults import (
    BatchingProfileJobResult,
    BatchingVerifyJobResult,
    RequestSamples,
    VerifyBatches,
    VerifyPrediction,
)
from optistudio.workers.artifacts import model_of
from optistudio.workers.jobs import JobContext
from optistudio.workers.outcome import Done

SAMPLE_POINTS = 2000
"""Most per-request rows kept in a verification result (evenly spaced), for the charts."""
PREDICT_REQUESTS = 5000
"""Requests behind a Verify's point predictions (as behind the page's sliders)."""
LOOKBACK = 200
"""Finished jobs of a kind searched for the profile in use."""


def profile_job(
    job: Job, spec: BatchingProfileSpec, context: JobContext
) -> Done[BatchingProfileJobResult]:
    """Time the job's model at each batch size."""
    model_path, _ = model_of(job)
    profile = measure_latency_profile(
        model_path,
        max_batch_size=spec.max_batch_size,
        backend=spec.backend,
        options=SessionOptions(device=spec.device, threads=spec.threads, spin_wait=spec.spin_wait),
        inputs=spec.model_inputs,
        min_seconds=spec.min_seconds,
        progress=context.progress,
    )
    ceiling, best = profile.ceiling(spec.max_batch_size)
    result = BatchingProfileJobResult(profile=profile, ceiling=ceiling, best_batch=best)
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
    return Done(message, result, environment=profile.environment)


def verify_job(
    job: Job, spec: BatchingVerifySpec, context: JobContext
) -> Done[BatchingVerifyJobResult]:
    """Predict the run from the profile in use, serve the job's model with the batching
    settings under load and measure, then refit the profile from the run's batches."""
    model_path, _ = model_of(job)
    in_use = profile_in_use(context, job, spec)
    before = _before(spec, *in_use) if in_use else None
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
        inputs=spec.model_inputs,
        seed=spec.seed,
    )
    prediction = _refit(job, spec, run, before, *in_use) if in_use and before else None
    result = BatchingVerifyJobResult(
        measured=run.result,
        requests=_samples(run),
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
    its profile as refitted by the newest earlier Verify of it; None without a profile job."""
    with transaction(context.factory) as s:
        profiles = [
            row
            for row in finished_jobs(s, kind=JobKind.batching_profile, limit=LOOKBACK)
            if row.model_id == job.model_id and spec.profile_job in (None, row.id)
        ]
        if not profiles:
            return None
        source = profiles[0]
        for row in finished_jobs(s, kind=JobKind.batching_verify, limit=LOOKBACK):
            if row.model_id != job.model_id or not source.id < row.id < job.id:
                continue
            earlier = BATCHING_VERIFY.read_result(row.result)
            if earlier and earlier.prediction and earlier.prediction.profile_job == source.id:
                return source.id, earlier.prediction.calibrated
        return source.id, BATCHING_PROFILE.parse_result(source.result).profile


def _before(
    spec: BatchingVerifySpec, profile_job: int, profile: LatencyProfile
) -> tuple[str, LoadResult, Band] | None:
    """What the profile in use predicts for this run, with its band, before it runs."""
    kwargs = {"rate": spec.rate, "process": spec.process, "clients": spec.clients}
    try:
        predicted = simulate(profile, spec.settings, requests=PREDICT_REQUESTS, **kwargs)
        band = simulate_band(profile, spec.settings, seconds=spec.seconds, **kwargs)
    except InvalidSpec:
        return None
    refits = calibration_line(profile)
    rests_on = f"the profile from job #{profile_job}, {refits or 'as measured'}"
    return rests_on, predicted, band


def _refit(
    job: Job,
    spec: BatchingVerifySpec,
    run: LoadRun,
    before: tuple[str, LoadResult, Band],
    profile_job: int,
    profile: LatencyProfile,
) -> VerifyPrediction | None:
    """The prediction made before the run, and the profile refitted from the run's batches
    with what it predicts for the run (at the realised rate); None when no batch ran."""
    rests_on, predicted, band = before
    try:
        calibrated = recalibrate_at_instances(
            profile,
            run,
            instances=spec.settings.instances,
            verify=f"Verify #{job.id}",
            timeout_ms=spec.settings.timeout_ms,
        )
    except InvalidSpec:
        return None
    not_adopted = saturated_refit(run.result, calibrated, profile)
    if not_adopted:
        calibrated = profile
    realised = run.result.realised_rate if spec.process != "closed" else None
    again = {"process": spec.process, "clients": spec.clients, "requests": PREDICT_REQUESTS}
    rate = realised or spec.rate
    sent = [ms / 1000 for ms in run.sent_ms] if realised else None
    replayed = {"rate": spec.rate, "arrivals": sent}
    return VerifyPrediction(
        profile_job=profile_job,
        rests_on=rests_on,
        predicted=predicted,
        band=band,
        at_realised=simulate(profile, spec.settings, rate=rate, **again) if realised else None,
        on_arrivals=simulate(profile, spec.settings, **replayed) if sent else None,
        arrivals_band=(
            simulate_band(profile, spec.settings, seconds=spec.seconds, **replayed)
            if sent
            else None
        ),
        slowdown=overall_slowdown(run.batches, profile.at_instances(spec.settings.instances)),
        calibrated=calibrated,
        not_adopted=not_adopted,
        recalibrated=(
            simulate(calibrated, spec.settings, **replayed)
            if sent
            else simulate(calibrated, spec.settings, rate=rate, **again)
        ),
    )


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
