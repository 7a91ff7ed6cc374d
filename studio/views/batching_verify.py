"""The Batching page's Verify: the form that sends a run, the runs against their
predictions, and how the refits converge (the logic: optistudio.studio.batching_verify)."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.results import Band, LoadResult
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.specs import BatchingVerifySpec, LatencyProfileSpec
from optistudio.core.batching.verify_policy import VerifyPrediction
from optistudio.db.models import JobKind
from optistudio.services.jobkinds import BATCHING_VERIFY
from optistudio.services.jobresults import BatchingVerifyJobResult
from optistudio.studio import (
    batching_figures,
    batching_verify,
    submitting,
)
from optistudio.studio.job_view import JobView
from optistudio.studio.views.batching_common import (
    cached_band,
    cached_predict,
    newest_finished,
)


def verify_form(
    model_id: int,
    settings: BatchingSettings,
    rate: float,
    served: LatencyProfileSpec,
    profile_job: int,
) -> None:
    threads = (
        f"{served.threads} threads"
        if served.threads
        else "the default threads (the worker's cores but one, shared out between instances)"
    )
    st.caption(
        "Serves the model with the real batching pipeline, Poisson arrivals at the chosen rate, "
        "and measures every request; the result is plotted beside the prediction, and the "
        "profile is refitted from the run's own batches for the next prediction. It serves as "
        f"the profile was made: {served.backend} on {served.device}, {threads} per instance "
        f"(here {settings.instances} instance(s), as the what-if sets them), and sends the "
        f"requests the profile timed: {batching_verify.request_line(served)}."
    )
    with st.form("batching_verify"):
        cols = st.columns([1, 4])
        seconds = cols[0].number_input("Seconds", 1.0, 600.0, 10.0)
        submitted = cols[1].form_submit_button("Verify", type="primary")
    if not submitted:
        return

    def spec() -> BatchingVerifySpec:
        return batching_verify.verify_spec(
            served, settings, rate=rate, seconds=seconds, profile_job=profile_job
        )

    if submitting.submit(BATCHING_VERIFY, model_id, spec, what="verify") is not None:
        # The Verify jobs below were read before this one was sent: run the page again so it
        # follows this job's progress (it names the job) instead of the previous result.
        st.rerun()


@dataclass(frozen=True)
class Judged:
    """What a Verify run is judged against: the prediction, its band, the prediction at the
    rate the run realised, what the prediction rests on (and the line about before the run)
    and the model's slowdown during the run as the job measured it."""

    predicted: LoadResult
    band: Band
    at_realised: LoadResult | None
    rests_on: str
    slowdown: float | None
    before_run: str = ""


def show_verification(
    jobs: list[JobView[BatchingVerifyJobResult]], measured: LatencyProfile
) -> None:
    """The newest Verify job beside the prediction it made before it ran (stored with it: the
    profile as recalibrated by the Verify runs before it, not by itself). A run stored before
    Verify predicted is judged against the profile as measured."""
    job = finished_verify_job(jobs)
    if job is None:
        return
    spec = BATCHING_VERIFY.parse_spec(job.spec)
    result = job.result
    assert result is not None  # finished_verify_job returns one with its result
    stored = result.prediction
    judged = (
        stored_judgement(stored)
        if stored is not None
        else judgement_as_measured(result, spec, measured)
    )
    frame = batching_verify.comparison_frame(
        judged.predicted, result.measured, judged.band, judged.at_realised
    )
    show_verdict(job, spec, result, judged)
    show_notes(result, judged, measured)
    left, right = st.columns(2)
    left.plotly_chart(batching_figures.comparison_figure(frame), width="stretch", key="verify-bars")
    right.plotly_chart(
        batching_figures.timeline_figure(result.requests), width="stretch", key="verify-time"
    )
    st.dataframe(batching_verify.verify_table(frame), hide_index=True, width="stretch")


def finished_verify_job(
    jobs: list[JobView[BatchingVerifyJobResult]],
) -> JobView[BatchingVerifyJobResult] | None:
    """The newest Verify job once it has succeeded; None after saying why not (none yet, a
    running one followed, a failed one's error)."""
    return newest_finished(
        jobs,
        JobKind.batching_verify,
        none_yet="No verification yet: press **Verify** to measure these settings for real.",
        what="Verify",
    )


def stored_judgement(stored: VerifyPrediction) -> Judged:
    """The prediction the run stored before it ran; on its own send times when it has them."""
    if stored.on_arrivals is None or stored.arrivals_band is None:
        return Judged(
            stored.predicted, stored.band, stored.at_realised, stored.rests_on, stored.slowdown
        )
    return Judged(
        stored.on_arrivals,
        stored.arrivals_band,
        stored.at_realised,
        stored.rests_on + " on this run's own send times (the arrivals' luck taken out)",
        stored.slowdown,
        before_run=batching_verify.before_run_line(stored.predicted, stored.band),
    )


def judgement_as_measured(
    result: BatchingVerifyJobResult, spec: BatchingVerifySpec, measured: LatencyProfile
) -> Judged:
    """For a run stored before Verify predicted: the prediction from the profile as measured."""
    profile_json, settings_json = measured.model_dump_json(), spec.settings.model_dump_json()
    predicted = LoadResult.model_validate(
        cached_predict(profile_json, settings_json, spec.rate or 1)
    )
    band = Band.model_validate(
        cached_band(profile_json, settings_json, spec.rate or 1, spec.seconds)
    )
    realised = result.measured.realised_rate
    at_realised = (
        LoadResult.model_validate(cached_predict(profile_json, settings_json, realised))
        if realised
        else None
    )
    return Judged(
        predicted, band, at_realised, "the profile as measured (this run predates refits)", None
    )


def show_verdict(
    job: JobView[BatchingVerifyJobResult],
    spec: BatchingVerifySpec,
    result: BatchingVerifyJobResult,
    judged: Judged,
) -> None:
    """The run's settings, what it is judged against, whether it landed in the band, and
    whether the load generator sent the rate asked."""
    st.markdown(
        f"**Verify job #{job.id}** · max batch {spec.settings.max_batch_size}, timeout "
        f"{spec.settings.timeout_ms:g} ms, {spec.settings.instances} instance(s), "
        f"{spec.rate:g} req/s · {job.message}"
    )
    st.caption(f"Judged against the prediction from {judged.rests_on}.{judged.before_run}")
    stored = result.prediction
    if stored is not None and stored.not_adopted:
        st.warning(stored.not_adopted)
    verdict, inside = batching_verify.band_verdict(judged.predicted, judged.band, result.measured)
    (st.success if inside else st.warning)(verdict)
    arrivals = batching_verify.rate_line(result.measured)
    sent = result.measured.throughput
    if arrivals is not None:
        (st.warning if arrivals[1] else st.caption)(arrivals[0])
    elif spec.rate and not result.measured.saturated and sent < 0.9 * spec.rate:
        st.warning(
            f"The load generator sent only about {sent:.0f} of the {spec.rate:g} req/s asked "
            "(one Python thread cannot go faster here), so measured and predicted describe "
            "different loads. Verify at a lower rate."
        )


def show_notes(result: BatchingVerifyJobResult, judged: Judged, measured: LatencyProfile) -> None:
    """Why measured and predicted may differ: the model's speed during the run, the tail."""
    stored = result.prediction
    at_speed = stored.recalibrated if stored is not None and not stored.not_adopted else None
    p99s = (judged.predicted.p99_ms, result.measured.p99_ms, at_speed.p99_ms if at_speed else None)
    mismatch = batching_verify.profile_mismatch(
        measured, result.batches, slowdown=judged.slowdown, p99s=p99s
    )
    if mismatch:
        st.warning(mismatch)
    tail = batching_verify.tail_note(result.measured, result.p99_halves_ms)
    if tail:
        (st.warning if tail[1] else st.caption)(tail[0])


def show_convergence(jobs: list[JobView[BatchingVerifyJobResult]], profile_job: int) -> None:
    """Predicted (before each run) against measured p99 over the Verify runs of this profile."""
    frame = batching_verify.convergence_frame(profile_job, jobs)
    if frame.empty:
        return
    st.plotly_chart(batching_figures.convergence_figure(frame), width="stretch", key="convergence")
    inside = int(frame["inside"].sum())
    st.caption(
        f"{inside} of {len(frame)} Verify runs measured a p99 inside the band predicted before "
        "they ran; each run then refits the profile, so at a few rates the predicted p99 should "
        "close on the measured one."
    )
