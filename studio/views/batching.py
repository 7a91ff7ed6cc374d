"""Batching: what max batch size and timeout to deploy, and what they will give.

Profile the model once (a job), then move the sliders: the simulator predicts throughput, p50/p99,
batch size and queue wait at once. Verify runs the real pipeline under load (a job) and plots it
beside the prediction; Find best settings searches under a p99 budget; Export writes the result.
A decoder with a KV cache gets its own section instead (optistudio.studio.views.batching_decoder).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st
from pydantic import ValidationError

from optistudio.core.batching.freeing import BatchFreeing
from optistudio.core.batching.latency import QUICK_PROBE_SCALE, LatencyProfile
from optistudio.core.batching.results import Band, LoadResult
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.simulate import VERIFY_SECONDS
from optistudio.core.batching.specs import DEFAULT_MAX_BATCH_SIZE, LatencyProfileSpec
from optistudio.core.batching.tuner import DEFAULT_MARGIN, capacity, recommend
from optistudio.core.data.inputs import parse_shape_overrides
from optistudio.core.errors import OptistudioError, describe_validation_error
from optistudio.core.model.info import ModelInfo
from optistudio.services.input_profiles import load_profile
from optistudio.services.jobkinds import BATCHING_VERIFY, LATENCY_PROFILE
from optistudio.services.jobresults import BatchingVerifyJobResult
from optistudio.studio import (
    batching_export,
    batching_figures,
    batching_verify,
    jobs_services,
    state,
    submitting,
)
from optistudio.studio import batching_whatif as whatif
from optistudio.studio.errors import show_error
from optistudio.studio.job_view import JobView
from optistudio.studio.model_picker import chosen_model
from optistudio.studio.model_services import model_choices, model_file, model_info
from optistudio.studio.views import batching_decoder
from optistudio.studio.views.batching_common import (
    backend_and_max_batch_size,
    cached_band,
    cached_by_instances,
    cached_predict,
    cached_speed_note,
    cached_sweep,
    newest_latency_profile_job,
)
from optistudio.studio.views.batching_verify import show_convergence, show_verification, verify_form

KEYS = {
    "max_batch_size": "batching_max_batch",
    "timeout_ms": "batching_timeout",
    "eager_threshold": "batching_eager",
    "instances": "batching_instances",
    "rate": "batching_rate",
}


def render() -> None:
    st.title("Batching")
    st.caption(
        "Which max batch size and batching timeout to deploy, and what they give. Profile the "
        "model once; the sliders then predict throughput and latency by simulating the batching "
        "policy under your arrival rate; Verify measures the real pipeline to check."
    )
    chosen = chosen_model(
        "Add a model on the Models page first, then tune its batching here.",
        model_choices(state.session_factory()),
    )
    if chosen is None:
        return
    model_id = chosen["id"]
    card = batching_decoder.decoder_card_of(chosen["sha256"], chosen["path"])
    if card is not None:  # served by batching decode steps, not requests
        batching_decoder.render(model_id, card)
        return
    name, info = model_info(state.session_factory(), model_id=model_id)
    axes = load_profile(state.session_factory(), model_id).moved_axes(info.inputs)
    freeing = cached_freeing(chosen["sha256"], chosen["path"], info, axes)
    problem = whatif.batching_problem(info, axes, freeing)  # the jobs' own rule
    if problem:
        st.warning(f"Dynamic batching does not apply to this model: {problem}")
        st.caption(
            "Set each input's batch axis in the input profile on the Models page, or export "
            "the model with a dynamic batch dimension, to batch requests."
        )
        return
    if note := whatif.batching_note(freeing):
        st.info(note)
    latency_profile_form(model_id)
    found = show_latency_profile_job(model_id)
    if found is None:
        return
    measured, served, profile_job = found
    verify_jobs = jobs_services.recent_jobs(
        state.session_factory(), kind=BATCHING_VERIFY, model_id=model_id
    )
    profile, rests_on = batching_verify.profile_in_use(profile_job, measured, verify_jobs)
    st.caption(rests_on)
    settings, rate = sliders(profile, measured)
    if settings is None:
        return
    show_prediction(profile, settings, rate)
    tabs = st.tabs(["Verify", "Find best settings", "Export"])
    with tabs[0]:
        verify_form(model_id, settings, rate, served, profile_job)
        show_verification(verify_jobs, measured)
        show_convergence(verify_jobs, profile_job)
    with tabs[1]:
        best_settings(profile, rate)
    with tabs[2]:
        export(name, info, settings, served, verify_jobs)


@st.cache_data(show_spinner=False, max_entries=64)
def cached_freeing(
    sha256: str, path: str, _info: ModelInfo, axes: dict[str, int | None] | None
) -> BatchFreeing:
    """What the batching jobs free in the stored model (its graph read once per digest and
    batch axes; the card's dims when the file is not at hand here)."""
    local = model_file(state.settings(), path=path, sha256=sha256)
    return whatif.model_freeing(local, _info, axes)


def latency_profile_form(model_id: int) -> None:
    with st.form("batching_profile"):
        cols = st.columns([2, 1, 1, 3])
        backend, max_batch_size = backend_and_max_batch_size(
            cols, largest=256, timed="Timed: 1, 2, 4, ..."
        )
        threads = cols[2].number_input(
            "Threads",
            0,
            256,
            0,
            help="Intra-op threads per instance; 0 = the default: the worker's cores but one, "
            "leaving one to the serving threads (callers, dispatcher, result hand-back). Verify "
            "runs with the profile's. Without that core the serving threads preempt the model "
            "mid-batch and its speed under load, so the tail, strays from the profile: on 2 "
            "cores the tuner's picks kept their p99 budget when served in 2 of 6 cases with both "
            "threads, 6 of 6 with one. Set all cores for the most peak throughput "
            "(docs/BENCHMARKS.md).",
        )
        shapes = cols[3].text_input(
            "Request shape (optional)",
            placeholder="input_ids=1,128",
            help="Full shape of one request per input, NAME=D1,D2,...; several with spaces.",
        )
        quick = st.checkbox(
            "Quick profile",
            help=f"Serving probes at {QUICK_PROBE_SCALE:.0%} of their length: about a third of "
            "the time, for a first look. Its serving figures rest on fewer requests, so Verify "
            "lands outside the predicted band more often; profile at full length before "
            "trusting a p99.",
        )
        submitted = st.form_submit_button("Profile", type="primary")
    if submitted:  # the spec is made (and refused, saying why) inside submit
        submit_latency_profile(
            model_id,
            lambda: LatencyProfileSpec(
                backend=backend,
                max_batch_size=max_batch_size,
                threads=int(threads) or None,
                shapes=parse_shape_overrides(shapes.split()),
                probe_time_scale=QUICK_PROBE_SCALE if quick else 1.0,
            ),
        )


def submit_latency_profile(model_id: int, spec: Callable[[], LatencyProfileSpec]) -> None:
    """Send the latency profile job the form's `spec` makes, saying what comes next."""
    sent = submitting.submit(LATENCY_PROFILE, model_id, spec, what="profile")
    if sent is not None:
        st.success(f"Profile job #{sent.job_id} submitted; the sliders appear when it is done.")


def show_latency_profile_job(
    model_id: int,
) -> tuple[LatencyProfile, LatencyProfileSpec, int] | None:
    """The latest profile, the spec it was made with (the backend, device and threads that
    Verify must serve with to check it) and its job id, or None after saying why there is
    none."""
    job = newest_latency_profile_job(
        model_id,
        none_yet="No profile of this model yet. Press **Profile**: it times batch sizes 1, 2, "
        "4, ...",
    )
    if job is None:
        return None
    assert job.result is not None  # newest_latency_profile_job returns one with its result
    profile = job.result.profile
    if profile is None:  # a decoder's decode profile, of a model no longer read as one
        st.info(f"Profile job #{job.id} holds decode steps, not a latency profile.")
        return None
    with st.expander(f"Profile job #{job.id} · {job.message}", expanded=False):
        st.plotly_chart(batching_figures.profile_figure(profile), width="stretch", key="profile")
    st.caption(whatif.handoff_line(profile))
    for note in (profile.quick_note(), profile.pace_note()):
        if note:
            st.warning(note)
    return profile, LATENCY_PROFILE.parse_spec(job.spec), job.id


def sliders(
    profile: LatencyProfile, measured: LatencyProfile
) -> tuple[BatchingSettings | None, float]:
    """The what-if's sliders; their ranges come from the profile as `measured` (a Verify's
    refit of `profile` does not move them, so it resets nothing)."""
    largest = profile.batch_sizes[-1]
    bounds = whatif.rate_bounds(measured, largest)
    most = whatif.most_instances(measured)
    default = measured.ceiling(min(DEFAULT_MAX_BATCH_SIZE, largest), with_handoff=True)[0] * 0.6
    _defaults(largest, bounds, most, default)
    st.subheader("What if")
    cols = st.columns(5)
    max_batch = cols[0].slider("Max batch size", 1, largest, key=KEYS["max_batch_size"])
    timeout = cols[1].slider("Timeout (ms)", 0.0, 50.0, step=0.5, key=KEYS["timeout_ms"])
    eager = cols[2].slider(
        "Eager threshold (0 = off)",
        0,
        largest,
        key=KEYS["eager_threshold"],
        help="Send a batch at once when this many requests wait.",
    )
    instances = cols[3].slider(
        "Instances",
        1,
        max(2, most),
        key=KEYS["instances"],
        help="Model instances (sessions), each with its share of the threads; predicted at "
        "the latency measured with that many running at once.",
    )
    low, high, step = bounds
    rate = cols[4].slider("Arrival rate (req/s)", low, high, step=step, key=KEYS["rate"])
    st.session_state["batching_rate_kept"] = rate
    values = {"max_batch_size": max_batch, "timeout_ms": timeout, "instances": instances}
    _to_url(values | {"eager_threshold": eager, "rate": rate})
    try:
        settings = BatchingSettings(**values, eager_threshold=eager or None)
    except ValidationError as exc:
        st.error(f"These settings do not fit together: {describe_validation_error(exc)}")
        return None, rate
    note = whatif.instances_caption(profile, instances)
    if note:
        st.caption(note)
    return settings, rate


def _defaults(
    largest: int, bounds: tuple[float, float, float], most: int, default_rate: float
) -> None:
    """First values from the URL, else max batch 8 (or less), 2 ms and 60 % of what that
    setting can serve; a value out of this profile's range falls back to its default, but
    the rate is kept (pulled into range) whenever the slider's range changes."""
    default = whatif.kept_rate(default_rate, bounds, bounds[0])
    defaults: dict[str, int | float] = {
        "max_batch_size": min(DEFAULT_MAX_BATCH_SIZE, largest),
        "timeout_ms": 2.0,
        "eager_threshold": 0,
        "instances": 1,
        "rate": default,
    }
    limits = {
        "max_batch_size": (1, largest),
        "timeout_ms": (0.0, 50.0),
        "eager_threshold": (0, largest),
        "instances": (1, max(2, most)),
        "rate": bounds[:2],
    }
    for field, default_value in defaults.items():
        key = KEYS[field]
        if key not in st.session_state:
            from_url = _from_url(field, type(default_value))
            st.session_state[key] = default_value if from_url is None else from_url
        low, high = limits[field]
        if field == "rate":
            moved = st.session_state.get("batching_rate_bounds") != bounds
            kept = st.session_state.get("batching_rate_kept", st.session_state[key])
            if moved or not low <= st.session_state[key] <= high:
                st.session_state[key] = whatif.kept_rate(kept, bounds, default)
        elif not low <= st.session_state[key] <= high:
            st.session_state[key] = default_value  # e.g. another model's profile was shorter
    st.session_state["batching_rate_bounds"] = bounds


def _from_url(field: str, cast: type) -> int | float | None:
    try:
        return cast(st.query_params[field]) if field in st.query_params else None
    except ValueError:
        return None


def _to_url(values: dict[str, int | float]) -> None:
    """Keep the what-if in the URL, so the view can be pasted to someone."""
    for field, value in values.items():
        if st.query_params.get(field) != str(value):
            st.query_params[field] = str(value)


_METRICS = (
    ("Throughput (req/s)", "throughput"),
    ("p50 latency (ms)", "p50_ms"),
    ("p99 latency (ms)", "p99_ms"),
    ("Mean batch size", "mean_batch_size"),
    ("Mean queue wait (ms)", "mean_queue_ms"),
)


def show_prediction(profile: LatencyProfile, settings: BatchingSettings, rate: float) -> None:
    predicted = cached_predict(profile.model_dump_json(), settings.model_dump_json(), rate)
    st.session_state["batching_predicted"] = predicted
    band = Band.model_validate(
        cached_band(profile.model_dump_json(), settings.model_dump_json(), rate, VERIFY_SECONDS)
    )
    point = LoadResult.model_validate(predicted)
    overloaded = whatif.overload_line(profile, settings, rate)
    figures = whatif.headline(band, point, overloaded=bool(overloaded))  # inside the band
    cols = st.columns(5)
    for col, (label, key) in zip(cols, _METRICS, strict=True):
        value = figures[key]
        col.metric(label, "-" if value is None else f"{value:.{1 if key == 'throughput' else 2}f}")
    if overloaded:
        st.error(overloaded)
        st.caption(whatif.overloaded_band_line(band))
    else:
        st.caption(whatif.band_line(point.model_copy(update=figures), band))
    if predicted["saturated"] and not overloaded:
        most = capacity(profile, settings)
        st.warning(
            f"Requests arrive faster than these settings can serve (at most {most:.0f} req/s): "
            "the queue keeps growing, so latency has no steady value. Raise the max batch size "
            "or instances, or lower the rate."
        )
    elif not overloaded:
        line, knee = cached_speed_note(
            profile.model_dump_json(), settings.model_dump_json(), rate, predicted["p99_ms"]
        )
        (st.warning if knee else st.caption)(line)
    frame = cached_sweep(profile.model_dump_json(), settings.model_dump_json())
    st.plotly_chart(batching_figures.sweep_figure(frame, rate), width="stretch", key="sweep")
    with st.expander("By instance count (these settings, this rate)"):
        st.dataframe(
            cached_by_instances(profile.model_dump_json(), settings.model_dump_json(), rate),
            hide_index=True,
            width="stretch",
        )


def best_settings(profile: LatencyProfile, rate: float) -> None:
    cols = st.columns([1, 1, 2, 2])
    budget = cols[0].number_input("p99 budget (ms)", 0.1, 60_000.0, 50.0, key="batching_budget")
    margin = cols[1].number_input(
        "Speed margin (%)",
        0,
        50,
        round(DEFAULT_MARGIN * 100),
        key="batching_margin",
        help="The budget must also hold with the model this much slower than profiled (and "
        "the serving threads with it: they share its cores). Served "
        "under load, a model runs a few percent off its profiled speed (0.88-1.20x from run to "
        "run on a 2-core machine), and near a setting's knee that is most of its p99: a setting "
        "that fits only at exactly the profiled speed will miss when measured. 0 trusts the "
        "profile as it is.",
    )
    mode = cols[2].radio(
        "Aim", ["At the arrival rate above", "Max throughput"], key="batching_aim", horizontal=True
    )
    if not cols[3].button("Find best settings", type="primary"):
        advice = st.session_state.get("batching_advice")
        if advice is None:
            st.info("Set a p99 budget and press **Find best settings**.")
            return
    else:
        bar = st.progress(
            0.0,
            text="Simulating instance counts x max batch sizes x timeouts, then holding the "
            "best to a Verify's p99 band (up to a minute for Max throughput)...",
        )
        advice = recommend(
            profile,
            p99_budget_ms=budget,
            rate=rate if mode.startswith("At") else None,
            max_batch_size=profile.batch_sizes[-1],
            margin=margin / 100,
            progress=lambda fraction, message: bar.progress(min(fraction, 1.0), text=message),
        )
        bar.empty()
        st.session_state["batching_advice"] = advice
    (st.success if advice.feasible else st.warning)(advice.reason)
    st.plotly_chart(batching_figures.candidates_figure(advice), width="stretch", key="candidates")
    st.button("Apply to the sliders", on_click=_apply, args=(advice.settings,))


def _apply(settings: BatchingSettings) -> None:
    st.session_state[KEYS["max_batch_size"]] = settings.max_batch_size
    st.session_state[KEYS["timeout_ms"]] = float(settings.timeout_ms)
    st.session_state[KEYS["eager_threshold"]] = settings.eager_threshold or 0
    st.session_state[KEYS["instances"]] = settings.instances


def export(
    name: str,
    info: Any,
    sliders_settings: BatchingSettings,
    served: LatencyProfileSpec,
    verify_jobs: list[JobView[BatchingVerifyJobResult]],
) -> None:
    serving = batching_export.verified_serving(sliders_settings, verify_jobs)
    settings = serving.batching()
    st.caption(
        "The settings for our runtime (pipeline.json v1: `optistudio serve pipeline.json` with "
        "the model beside it, or `PipelineOptimizer.from_file`) or for Triton Inference "
        f"Server's dynamic batcher (instance_group count = the instances). {serving.note}"
    )
    cols = st.columns(2)
    cols[0].download_button(
        "Download pipeline.json",
        batching_export.pipeline_json(name, info, served, serving),
        file_name="pipeline.json",
        mime="application/json",
    )
    try:
        triton = batching_export.triton_text(name, info, settings)
    except OptistudioError as exc:
        show_error(exc, tone="warning", where=cols[1])
        return
    cols[1].download_button(
        "Download config.pbtxt", triton, file_name="config.pbtxt", mime="text/plain"
    )
    with st.expander("config.pbtxt"):
        st.code(triton, language="protobuf")
