"""The Models page for a decoder with a KV cache: its card in a language model's terms (layers,
heads and KV heads, vocabulary, context, the cache bytes a token adds, parameters split between
the embeddings, the LM head and the rest) and its newest decoding benchmark.

A decoder is fed token ids and its own cache by the decode loop, so the input sizes the profile
editor proposes for other models do not apply to it: bench, optimize and batching time it by
decoding (optistudio.core.llm), and the page says so instead of offering sizes.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from optistudio.core.llm.card import DecoderCard
from optistudio.core.llm.serving import DecoderBenchSettings
from optistudio.studio import state
from optistudio.studio.formatting import human_bytes, human_count
from optistudio.studio.results_services import decoder_benchmarks
from optistudio.studio.views.batching_decoder import decoder_card_of

NOT_PROFILED = (
    "A decoder is fed token ids and its own KV cache by the decode loop, so input sizes do not "
    "apply: Benchmark times its prefill (time to first token) and greedy decoding (tokens/s), "
    "Optimize judges its variants by perplexity on a text, and Batching predicts serving its "
    "decoding steps."
)
_TIMED = DecoderBenchSettings()
BENCH_CAPTION = (
    f"A decoder is benchmarked as it is stored (FP32) by its decode loop: {_TIMED.steps} greedy "
    f"steps after a {_TIMED.decode_prompt}-token prompt at each batch size, and the time to "
    f"first token of {', '.join(map(str, _TIMED.prompt_lengths))}-token prompts (those that fit "
    f"its context, {_TIMED.repeats} each). Batch sizes and threads apply; the warm-up, run, "
    "time and core settings are another model's and are left out."
)
INTAKE_NOISE = ("dynamic dims ", "FLOPs could not be estimated", "the FLOPs estimate sets")
"""Intake's warnings about dynamic dims and the FLOPs they hide: the decode loop sets a
decoder's lengths and cache, so they tell its user nothing."""


def card_warnings(warnings: list[str]) -> list[str]:
    """The ordinary card's warnings worth showing for a decoder (not its dynamic dims')."""
    return [w for w in warnings if not w.startswith(INTAKE_NOISE)]


def decoder_targets(targets: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """The targets a decoder benchmark runs: FP32 ones (it is timed as stored, never converted;
    a weight-only INT8 or INT4 variant is made on the Optimize page)."""
    return [t for t in targets if t[2] == "fp32"]


def card_of(chosen: dict[str, Any]) -> DecoderCard | None:
    """The decoder card of the chosen model; None for any other model."""
    return decoder_card_of(chosen["sha256"], chosen["path"])


def decoder_card(card: DecoderCard, model_id: int) -> None:
    """The language model's figures under the ordinary card, then its newest decoding bench."""
    st.markdown("**Language model**")
    cols = st.columns(5)
    cols[0].metric("Layers", card.layers)
    heads = "?" if card.heads is None else str(card.heads)
    cols[1].metric(
        "Heads / KV heads",
        f"{heads} / {card.kv_heads}",
        help=f"Query heads and key/value heads, head size {card.head_dim}.",
    )
    cols[2].metric("Vocabulary", "?" if card.vocab is None else f"{card.vocab:,}")
    cols[3].metric("Context", "?" if card.context_length is None else f"{card.context_length:,}")
    cols[4].metric(
        "KV cache per token",
        human_bytes(card.kv_bytes_per_token),
        help="Bytes one token adds to one sequence's cache (keys and values, every layer)."
        + _full_context(card),
    )
    split = card.parameters
    head = "tied to the embedding" if split.tied else human_count(split.lm_head)
    st.caption(
        f"Parameters: {human_count(split.embedding)} in the embeddings, LM head {head}, "
        f"{human_count(split.rest)} in the rest (attention, MLP, norms); "
        f"{human_bytes(card.size_bytes)} on disk. Read from: "
        + ", ".join(f"{fact} ({where})" for fact, where in sorted(card.sources.items()))
    )
    newest_bench(model_id)


def _full_context(card: DecoderCard) -> str:
    if card.context_length is None:
        return ""
    full = card.kv_bytes_per_token * card.context_length
    return f" A sequence at its full context of {card.context_length:,} tokens holds {human_bytes(full)}."


def newest_bench(model_id: int) -> None:
    runs = decoder_benchmarks(state.session_factory(), model_id=model_id, limit=1)
    if not runs:
        st.caption("No decoding benchmark yet: run Benchmark below for TTFT and tokens/s.")
        return
    run = runs[0]
    with st.expander(f"Newest decoding benchmark · job #{run.job.id} · {run.measured_on}"):
        left, right = st.columns(2)
        left.markdown("**Time to first token (batch 1)**")
        left.dataframe(run.prefill, hide_index=True, width="stretch")
        right.markdown("**Greedy decoding**")
        right.dataframe(run.decode, hide_index=True, width="stretch")
