"""The Batching page for a decoder with a KV cache: Profile times its decode steps, then the
inputs predict static or continuous serving at once (the logic: optistudio.studio.
decoder_batching; the charts: optistudio.studio.decoder_batching_figures)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from optistudio.core.batching.specs import LatencyProfileSpec
from optistudio.core.llm.batched_serving import ServingPolicy
from optistudio.core.llm.card import DecoderCard
from optistudio.core.llm.serving_whatif import DecodeProfile, ServingWhatIf
from optistudio.services.jobkinds import LATENCY_PROFILE
from optistudio.studio import decoder_batching as decoder
from optistudio.studio import state, submitting
from optistudio.studio.decoder_batching_figures import decode_profile_figure, decoder_sweep_figure
from optistudio.studio.model_services import model_file
from optistudio.studio.views.batching_common import (
    backend_and_max_batch_size,
    newest_latency_profile_job,
)

LARGEST_BATCH = 32
"""The form's largest batch: the profile job times a decoder at most at batch 32
(optistudio.workers.batching_decoder.DECODE_MAX_BATCH)."""
KEYS = {
    "prompt_tokens": "decoder_prompt_tokens",
    "new_tokens": "decoder_new_tokens",
    "batching": "decoder_batching",
    "max_batch": "decoder_max_batch",
    "timeout_ms": "decoder_timeout_ms",
    "rate": "decoder_rate",
}
"""Each input's session key, which is also its name in the URL (apart from the one-shot
sliders' `rate` and `timeout_ms`, which mean other things)."""
PROFILED = "decoder_profiled_by"
"""The profile job the inputs were last set up for: another one sets them up again."""
URL_READ = "decoder_url_read"
"""Set once the inputs took the URL's values: a pasted URL sets them up once, and a model
picked afterwards starts from its own defaults, not the previous model's values."""


@st.cache_data(show_spinner=False, max_entries=128)
def decoder_card_of(sha256: str, path: str) -> DecoderCard | None:
    """The card of the stored model (its digest keys the cache) when it is a decoder."""
    return decoder.decoder_card(model_file(state.settings(), path=path, sha256=sha256))


def render(model_id: int, card: DecoderCard) -> None:
    st.subheader("A decoder: batching its decoding steps")
    st.caption(decoder.BUILT)
    decode_profile_form(model_id)
    found = stored_profile(model_id)
    if found is not None:
        profile, job_id = found
        load = inputs(profile, card, job_id)
        if load is not None:
            show_prediction(profile, load)
    st.caption(decoder.NOT_MODELLED)
    st.info(decoder.VERIFY_CLI)


def decode_profile_form(model_id: int) -> None:
    with st.form("decoder_profile"):
        cols = st.columns([2, 1, 1, 3])
        backend, max_batch_size = backend_and_max_batch_size(
            cols, largest=LARGEST_BATCH, timed="Decode steps timed at 1, 2, 4, ... rows."
        )
        threads = cols[2].number_input(
            "Threads", 0, 256, 0, help="Intra-op threads; 0 = the runtime's default."
        )
        submitted = cols[3].form_submit_button("Profile", type="primary")
    if not submitted:
        return

    def spec() -> LatencyProfileSpec:
        return LatencyProfileSpec(
            backend=backend, max_batch_size=max_batch_size, threads=int(threads) or None
        )

    sent = submitting.submit(LATENCY_PROFILE, model_id, spec, what="profile")
    if sent is not None:
        st.success(f"Profile job #{sent.job_id} submitted; the inputs appear when it is done.")


def stored_profile(model_id: int) -> tuple[DecodeProfile, int] | None:
    """The newest profile job's decode profile and its id, or None after saying why none."""
    job = newest_latency_profile_job(
        model_id,
        none_yet="No decode profile of this model yet. Press **Profile**: it times a decoding "
        "step at batch 1, 2, 4, ... and a prefill per prompt length.",
    )
    if job is None:
        return None
    assert job.result is not None  # newest_latency_profile_job returns one with its result
    profile = job.result.decode_profile
    if profile is None:
        st.info(
            f"Profile job #{job.id} timed this decoder as one-shot requests (before decoders "
            "were profiled by decoding): press **Profile** to time its decode steps."
        )
        return None
    with st.expander(f"Profile job #{job.id} · {job.message}", expanded=False):
        st.plotly_chart(decode_profile_figure(profile), width="stretch", key="decoder-profile")
        st.dataframe(decoder.profile_rows(profile), hide_index=True, width="stretch")
    return profile, job.id


def inputs(profile: DecodeProfile, card: DecoderCard, job_id: int) -> decoder.DecoderLoad | None:
    """The what-if's inputs (first from the URL, else defaults that fit the context); None
    after saying why when the lengths do not fit the model."""
    largest = profile.batch_sizes[-1]
    context = card.context_length or 1_000_000
    _defaults(profile, card, job_id)
    st.subheader("What if")
    cols = st.columns(3)
    prompt = int(cols[0].number_input("Prompt tokens", 1, context, key=KEYS["prompt_tokens"]))
    new = int(cols[1].number_input("New tokens", 1, context, key=KEYS["new_tokens"]))
    batching = cols[2].radio(
        "Batching",
        ["continuous", "static"],
        key=KEYS["batching"],
        horizontal=True,
        help=ServingPolicy.model_fields["batching"].description,
    )
    cols = st.columns(3)
    if largest > 1:
        max_batch = cols[0].slider(
            "Max batch (sequences per step)", 1, largest, key=KEYS["max_batch"]
        )
    else:
        max_batch = 1
        cols[0].caption("Max batch 1: the profile timed batch 1 only.")
    timeout = cols[1].number_input(
        "Static timeout (ms)",
        0.0,
        60_000.0,
        step=1.0,
        key=KEYS["timeout_ms"],
        disabled=batching != "static",
        help=ServingPolicy.model_fields["timeout_ms"].description,
    )
    rate = cols[2].number_input(
        "Arrival rate (requests/s)", 0.001, 1e6, format="%.3f", key=KEYS["rate"]
    )
    values = {"prompt_tokens": prompt, "new_tokens": new, "batching": batching}
    values |= {"max_batch": max_batch, "timeout_ms": timeout, "rate": rate}
    _to_url(values)
    problem = decoder.context_problem(card, prompt, new)
    if problem:
        st.warning(problem)
        return None
    policy = ServingPolicy(batching=batching, max_batch=max_batch, timeout_ms=timeout)
    return decoder.DecoderLoad(rate=rate, policy=policy, prompt_tokens=prompt, new_tokens=new)


def _defaults(profile: DecodeProfile, card: DecoderCard, job_id: int) -> None:
    """Set the inputs up once per profile job: from the URL where it fits, else defaults."""
    if st.session_state.get(PROFILED) == job_id:
        return
    prompt, new = decoder.default_lengths(card)
    largest = profile.batch_sizes[-1]
    policy = ServingPolicy(batching="continuous", max_batch=min(4, largest))
    first = decoder.DecoderLoad(rate=1.0, policy=policy, prompt_tokens=prompt, new_tokens=new)
    defaults: dict[str, Any] = {
        "prompt_tokens": prompt,
        "new_tokens": new,
        "batching": "continuous",
        "max_batch": policy.max_batch,
        "timeout_ms": 0.0,
        "rate": decoder.first_rate(profile, first),
    }
    context = card.context_length or 1_000_000
    fits = {
        "prompt_tokens": lambda v: 1 <= v <= context,
        "new_tokens": lambda v: 1 <= v <= context,
        "batching": lambda v: v in ("continuous", "static"),
        "max_batch": lambda v: 1 <= v <= largest,
        "timeout_ms": lambda v: 0 <= v <= 60_000,
        "rate": lambda v: 0.001 <= v <= 1e6,
    }
    from_url = not st.session_state.get(URL_READ)
    for field, default in defaults.items():
        wanted = _from_url(KEYS[field], type(default)) if from_url else None
        ok = wanted is not None and fits[field](wanted)
        st.session_state[KEYS[field]] = wanted if ok else default
    st.session_state[PROFILED] = job_id
    st.session_state[URL_READ] = True


def _from_url(name: str, cast: type) -> Any:
    try:
        return cast(st.query_params[name]) if name in st.query_params else None
    except ValueError:
        return None


def _to_url(values: dict[str, Any]) -> None:
    """Keep the what-if in the URL, so the view can be pasted to someone."""
    for field, value in values.items():
        if st.query_params.get(KEYS[field]) != str(value):
            st.query_params[KEYS[field]] = str(value)


@st.cache_data(max_entries=256, show_spinner=False)
def cached_predict(profile_json: str, load_json: str) -> dict[str, Any]:
    profile = DecodeProfile.model_validate_json(profile_json)
    load = decoder.DecoderLoad.model_validate_json(load_json)
    return decoder.predict(profile, load).model_dump()


@st.cache_data(max_entries=64, show_spinner="Predicting both policies at 10 arrival rates...")
def cached_sweep(profile_json: str, load_json: str) -> Any:
    profile = DecodeProfile.model_validate_json(profile_json)
    return decoder.rate_sweep(profile, decoder.DecoderLoad.model_validate_json(load_json))


def show_prediction(profile: DecodeProfile, load: decoder.DecoderLoad) -> None:
    profile_json = profile.model_dump_json()
    whatif = ServingWhatIf.model_validate(cached_predict(profile_json, load.model_dump_json()))
    figures = decoder.headline(whatif)
    for row in (list(figures.items())[:4], list(figures.items())[4:]):
        for col, (label, value) in zip(st.columns(4), row, strict=False):
            col.metric(label, f"{value:.1f}" if value >= 100 else f"{value:.2f}")
    saturated = whatif.predicted.saturated
    st.metric("Queue", "keeps growing" if saturated else "steady")
    st.caption(decoder.load_line(whatif, profile))
    warning = decoder.saturation_line(whatif)
    if warning:
        st.warning(warning)
    # the sweep draws both policies at rates of its own: the rate and policy do not key it
    swept = load.model_copy(
        update={"rate": 1.0, "policy": load.policy.model_copy(update={"batching": "continuous"})}
    )
    frame = cached_sweep(profile_json, swept.model_dump_json())
    figure = decoder_sweep_figure(frame, load.rate, whatif.ceiling_tokens_per_s)
    st.plotly_chart(figure, width="stretch", key="decoder-sweep")
