"""How a Verify run checks and refits the latency profile: one policy for the worker and page.

A Verify predicts its own run before it serves, from the profile in use, and afterwards refits
that profile from its own batches (optistudio.core.batching.recalibrate):

- **In use** (`newest_refit`, `profile_in_use`): the newest Verify of a profile job that
  refitted it wins; with none, the profile as measured. Each refit starts from the one before
  it, so the chain converges on the served speed.
- **Before** (`predict_before`): the profile in use predicts the run at the offered rate, with
  the band of every draw of arrivals.
- **After** (`refit_after`): the profile is refitted from the run's batches on the count of
  instances served. A saturated run's refit is not adopted (`saturated_refit` says why), so a
  run that only measured its own queue cannot move the service time. The prediction is then
  repeated at the rate the run realised and on its own send times, so the page can tell
  arrival luck from a wrong profile.

The worker (workers/batching_jobs.py) only fetches the rows and stores the `VerifyPrediction`;
the Batching page reads the same `newest_refit`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.loadgen import LoadRun
from optistudio.core.batching.recalibrate import (
    calibration_line,
    recalibrate_at_instances,
    saturated_refit,
    served_slowdown,
)
from optistudio.core.batching.results import Band, LoadResult
from optistudio.core.batching.simulate import simulate, simulate_band
from optistudio.core.batching.specs import BatchingVerifySpec
from optistudio.core.errors import InvalidSpec

PREDICT_REQUESTS = 5000
"""Requests behind a Verify's point predictions (as behind the page's sliders)."""


class VerifyPrediction(BaseModel):
    """What a Verify job predicted before it ran, and the profile it refitted from its own
    batches afterwards; the Batching page predicts from the newest `calibrated`."""

    model_config = ConfigDict(extra="forbid")

    profile_job: int = Field(description="The profile job the chain of refits starts from.")
    rests_on: str = Field(description="The profile the prediction rested on, in words.")
    predicted: LoadResult = Field(description="At the offered rate (closed loop: clients).")
    band: Band
    at_realised: LoadResult | None = Field(
        default=None, description="The same profile at the arrival rate the run realised."
    )
    on_arrivals: LoadResult | None = Field(
        default=None,
        description="The same profile replaying the run's own send times: no arrival luck.",
    )
    arrivals_band: Band | None = Field(
        default=None, description="The band of `on_arrivals` (every draw on those send times)."
    )
    slowdown: float = Field(
        description="The run's runner time, less what the profile expects serving to add to it "
        "(idle and served extras), over the profile's bare latency for its batches "
        "(`served_slowdown`)."
    )
    calibrated: LatencyProfile = Field(
        description="The profile refitted by this run (the profile in use, unchanged, when the "
        "refit was not adopted)."
    )
    not_adopted: str | None = Field(
        default=None,
        description="Why this run's refit was not adopted (a saturated run), with how far it "
        "would have moved the service time; None when it was.",
    )
    recalibrated: LoadResult | None = Field(
        default=None,
        description="The refitted profile's prediction for this run (at the realised rate).",
    )


@dataclass(frozen=True)
class Refit:
    """A Verify job that refitted a profile job's profile, and what it stored."""

    job: int
    prediction: VerifyPrediction


@dataclass(frozen=True)
class Before:
    """What the profile in use predicts for a Verify run, before it runs."""

    rests_on: str
    predicted: LoadResult
    band: Band


def newest_refit(
    profile_job: int,
    verifies: Iterable[tuple[int, VerifyPrediction | None]],
    *,
    before_job: int | None = None,
) -> Refit | None:
    """The newest of `verifies` (job id, stored prediction) that refitted profile job
    `profile_job` (only those after it and, with `before_job`, before that job); None when none
    did."""
    chain = [
        Refit(job, prediction)
        for job, prediction in verifies
        if prediction is not None
        and prediction.profile_job == profile_job
        and job > profile_job
        and (before_job is None or job < before_job)
    ]
    return max(chain, key=lambda refit: refit.job, default=None)


def profile_in_use(
    profile_job: int,
    profile: LatencyProfile,
    verifies: Iterable[tuple[int, VerifyPrediction | None]],
    *,
    before_job: int | None = None,
) -> tuple[LatencyProfile, Refit | None]:
    """The profile predictions rest on: the newest refit's calibrated profile, or `profile`
    (profile job `profile_job`'s, as measured) when no Verify refitted it; with that refit."""
    refit = newest_refit(profile_job, verifies, before_job=before_job)
    return (refit.prediction.calibrated if refit else profile), refit


def predict_before(
    spec: BatchingVerifySpec, profile_job: int, profile: LatencyProfile
) -> Before | None:
    """What `profile` (in use for profile job `profile_job`) predicts for the run of `spec`,
    with its band; None when the simulator cannot take the settings."""
    kwargs = {"rate": spec.rate, "process": spec.process, "clients": spec.clients}
    try:
        predicted = simulate(profile, spec.settings, requests=PREDICT_REQUESTS, **kwargs)
        band = simulate_band(profile, spec.settings, seconds=spec.seconds, **kwargs)
    except InvalidSpec:
        return None
    refits = calibration_line(profile)
    return Before(
        f"the profile from job #{profile_job}, {refits or 'as measured'}", predicted, band
    )


def refit_after(
    spec: BatchingVerifySpec,
    run: LoadRun,
    before: Before,
    profile_job: int,
    profile: LatencyProfile,
    *,
    verify: str,
) -> VerifyPrediction | None:
    """The prediction made before the run, and `profile` refitted from the run's batches
    (`verify` names the run in the refit's record), with what it predicts for the run at the
    realised rate; None when no batch ran."""
    settings = spec.settings
    try:
        calibrated = recalibrate_at_instances(
            profile,
            run,
            instances=settings.instances,
            verify=verify,
            timeout_ms=settings.timeout_ms,
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
        rests_on=before.rests_on,
        predicted=before.predicted,
        band=before.band,
        at_realised=simulate(profile, settings, rate=rate, **again) if realised else None,
        on_arrivals=simulate(profile, settings, **replayed) if sent else None,
        arrivals_band=(
            simulate_band(profile, settings, seconds=spec.seconds, **replayed) if sent else None
        ),
        slowdown=served_slowdown(
            profile.at_instances(settings.instances), run, timeout_ms=settings.timeout_ms
        ),
        calibrated=calibrated,
        not_adopted=not_adopted,
        recalibrated=(
            simulate(calibrated, settings, **replayed)
            if sent
            else simulate(calibrated, settings, rate=rate, **again)
        ),
    )
