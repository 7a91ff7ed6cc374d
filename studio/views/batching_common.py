"""What the Batching page's parts share: following a job, and the cached simulator calls
behind the sliders (each keyed by the profile and settings as JSON)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.specs import DEFAULT_MAX_BATCH_SIZE, LatencyProfileSpec
from optistudio.db.models import JobKind
from optistudio.services.jobresults import LatencyProfileJobResult
from optistudio.studio import batching_whatif as whatif
from optistudio.studio import (
    jobs_services,
    state,
)
from optistudio.studio.backend_choices import backend_choices
from optistudio.studio.errors import show_error
from optistudio.studio.job_status import progress_text
from optistudio.studio.job_view import JobView, ResultT


def backend_and_max_batch_size(columns: Any, *, largest: int, timed: str) -> tuple[str, int]:
    """A profile form's first two boxes, in `columns[0]` and `[1]`: the backend (those the live
    workers have) and the "Largest batch" to time, the spec's `max_batch_size` (at most
    `largest`; `timed` says what is timed at each size)."""
    backend = columns[0].selectbox(
        "Backend",
        backend_choices(state.live_targets(), LatencyProfileSpec),
        help=LatencyProfileSpec.model_fields["backend"].description,
    )
    max_batch_size = columns[1].number_input(
        "Largest batch", 1, largest, DEFAULT_MAX_BATCH_SIZE, help=timed
    )
    return backend, int(max_batch_size)


@st.fragment(run_every="2s")
def wait_for_job(job: JobView[Any], kind: JobKind) -> None:
    jobs = jobs_services.recent_jobs(state.session_factory(), kind=kind, limit=50)
    current = next((j for j in jobs if j.id == job.id), job)
    if not current.active:
        st.rerun()
    st.progress(min(max(current.progress, 0.0), 1.0), text=progress_text(current))


@st.cache_data(max_entries=256, show_spinner=False)
def cached_predict(profile_json: str, settings_json: str, rate: float) -> dict[str, Any]:
    profile = LatencyProfile.model_validate_json(profile_json)
    settings = BatchingSettings.model_validate_json(settings_json)
    return whatif.predict(profile, settings, rate=rate).model_dump()


@st.cache_data(max_entries=256, show_spinner=False)
def cached_band(
    profile_json: str, settings_json: str, rate: float, seconds: float
) -> dict[str, Any]:
    profile = LatencyProfile.model_validate_json(profile_json)
    settings = BatchingSettings.model_validate_json(settings_json)
    return whatif.predict_band(profile, settings, rate=rate, seconds=seconds).model_dump()


@st.cache_data(max_entries=256, show_spinner=False)
def cached_speed_note(
    profile_json: str, settings_json: str, rate: float, p99: float
) -> tuple[str, bool]:
    profile = LatencyProfile.model_validate_json(profile_json)
    settings = BatchingSettings.model_validate_json(settings_json)
    return whatif.speed_note(profile, settings, rate=rate, p99_ms=p99)


@st.cache_data(max_entries=64, show_spinner=False)
def cached_sweep(profile_json: str, settings_json: str) -> Any:
    profile = LatencyProfile.model_validate_json(profile_json)
    settings = BatchingSettings.model_validate_json(settings_json)
    return whatif.rate_sweep(profile, settings)


@st.cache_data(max_entries=64, show_spinner=False)
def cached_by_instances(profile_json: str, settings_json: str, rate: float) -> Any:
    profile = LatencyProfile.model_validate_json(profile_json)
    settings = BatchingSettings.model_validate_json(settings_json)
    return whatif.by_instances(profile, settings, rate)


def newest_latency_profile_job(
    model_id: int, *, none_yet: str
) -> JobView[LatencyProfileJobResult] | None:
    """The model's newest latency profile job once it has succeeded; None after saying why
    not (`none_yet` when there is none; a running one is followed, a failed one's error shown)."""
    jobs = jobs_services.recent_jobs(
        state.session_factory(), kind=JobKind.latency_profile, model_id=model_id
    )
    return newest_finished(jobs, JobKind.latency_profile, none_yet=none_yet, what="Profile")


def newest_finished(
    jobs: list[JobView[ResultT]], kind: JobKind, *, none_yet: str, what: str
) -> JobView[ResultT] | None:
    """The newest of `jobs` (of `kind`, newest first) once it has succeeded with its result;
    None after saying why not: `none_yet` when there is none, a running one followed, a
    failed one's error ("`what` job #N failed: ...")."""
    if not jobs:
        st.info(none_yet)
        return None
    job = jobs[0]
    if job.active:
        wait_for_job(job, kind)
        return None
    if not job.succeeded or not job.result:
        show_error(job, prefix=f"{what} job #{job.id} {job.status}: ")
        return None
    return job
