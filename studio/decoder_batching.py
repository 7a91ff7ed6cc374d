"""The Batching page for a decoder with a KV cache: serving predicted from its decode profile.

A decoder is served by batching decoding steps (optistudio.core.llm.batched_serving): static
batching decodes a batch to its end before the next is formed, continuous batching refills a
finished sequence's place at the next step. The profile job measures what a step costs per
live batch size and what a prefill costs per prompt length (`DecodeProfile`); a prediction
runs the serving loop itself on a simulated clock at those costs
(optistudio.core.llm.serving_whatif.what_if), so the page runs no model and answers as the
inputs move. The continuous ceiling is the closed form N / (prefill(P) + (N - 1) step(B) / B):
what a continuous server whose batch stays full turns out.

Plain functions the page and tests call without Streamlit; the charts are in
optistudio.studio.decoder_batching_figures.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.errors import OptistudioError
from optistudio.core.llm.batched_serving import ServingPolicy
from optistudio.core.llm.card import DecoderCard, read_card
from optistudio.core.llm.folder import decoder_path, is_decoder_file
from optistudio.core.llm.serving_whatif import (
    DecodeProfile,
    ServingWhatIf,
    continuous_ceiling,
    what_if,
)

PREDICT_REQUESTS = 500
"""Requests simulated for the figures the inputs show (as `llm serve-whatif` does)."""
SWEEP_REQUESTS = (80, 200)
"""Fewest and most requests per point of the chart's rate sweep (2 policies x SWEEP_SHARES
points): as many as make SWEEP_TOKENS new tokens, so long answers keep the sweep to seconds."""
SWEEP_TOKENS = 12_800
SWEEP_SHARES = (0.1, 0.25, 0.4, 0.55, 0.7, 0.85, 1.0, 1.15, 1.3, 1.5)
"""The sweep's arrival rates, as shares of the rate the continuous ceiling serves."""
RATE_SHARE = 0.6
"""The first arrival rate offered: this share of the rate the continuous ceiling serves."""
PROMPT_TOKENS, NEW_TOKENS = 32, 64
"""The first request lengths (`llm serve-whatif`'s), when they fit the model's context."""

BUILT = (
    "A decoder is served by batching its decoding steps, not whole requests. Profile times one "
    "decoding step at batch 1, 2, 4, ... (through the same batched decoder a server runs) and "
    "one prefill per prompt length; the inputs below then run the serving loop itself "
    "(static or continuous batching) on a simulated clock at those costs, 500 Poisson "
    "arrivals, so nothing runs the model while you move them."
)
NOT_MODELLED = (
    "Not modelled: a step's growth with the cache length (steps are timed with 16 prompt "
    "tokens and a few dozen generated per row; attention over a few hundred tokens is small "
    "beside the weights a small model reads each step, but a long context costs more), the "
    "copy of the batch's cache when a request joins a live batch (the profile's prefills join "
    "an empty one), varied request lengths (every request has the prompt and new tokens set "
    "here), and a machine whose speed changes between the profile and the run. Measured "
    "against real serving (docs/BENCHMARKS.md, bench/llm_serving.py): tokens/s within 7 %, "
    "time per token p50 within 16 %, but the p99 of time per token about half the served one "
    "whenever rows are batched (served steps mix lengths and interleave prefills): read the "
    "p99 figures as lower bounds."
)
VERIFY_CLI = (
    "Verifying a decoder's prediction by serving it for real runs from the command line: "
    "`optistudio llm serve-whatif MODEL --rate R --batching continuous --max-batch B "
    "--prompt-tokens P --new-tokens N --verify 50` profiles the model, predicts, and serves "
    "50 such requests beside the prediction for the same arrivals."
)


class DecoderLoad(BaseModel):
    """What the page's inputs set: the requests' arrival rate and lengths, and the policy."""

    model_config = ConfigDict(extra="forbid")

    rate: float = Field(gt=0, description="Requests per second arriving (Poisson).")
    policy: ServingPolicy
    prompt_tokens: int = Field(ge=1, description="Prompt tokens of each request.")
    new_tokens: int = Field(ge=1, description="Tokens each request wants.")


def decoder_card(path: Path | None) -> DecoderCard | None:
    """The card of the decoder at `path`; None for a model that is not one (or no file)."""
    if path is None or not is_decoder_file(path):
        return None
    try:
        return read_card(decoder_path(path))
    except OptistudioError:
        return None


def default_lengths(card: DecoderCard) -> tuple[int, int]:
    """PROMPT_TOKENS and NEW_TOKENS when they fit the context, else a quarter and a half."""
    context = card.context_length
    if context is None or context >= PROMPT_TOKENS + NEW_TOKENS:
        return PROMPT_TOKENS, NEW_TOKENS
    return max(1, context // 4), max(1, context // 2)


def context_problem(card: DecoderCard, prompt_tokens: int, new_tokens: int) -> str | None:
    """Why these lengths cannot be served by this model, or None."""
    context = card.context_length
    if context is None or prompt_tokens + new_tokens <= context:
        return None
    return (
        f"A {prompt_tokens}-token prompt with {new_tokens} new tokens needs "
        f"{prompt_tokens + new_tokens} tokens of context, but the model holds {context} "
        f"({card.sources.get('context_length', 'graph')}): shorten the prompt or the answer."
    )


def ceiling_rate(profile: DecodeProfile, load: DecoderLoad) -> float:
    """Requests per second the continuous ceiling serves at this max batch and these lengths."""
    tokens_per_s = continuous_ceiling(
        profile, load.policy.max_batch, load.prompt_tokens, load.new_tokens
    )
    return tokens_per_s / load.new_tokens


def first_rate(profile: DecodeProfile, load: DecoderLoad) -> float:
    """The arrival rate first offered: RATE_SHARE of the ceiling's, to 3 significant digits."""
    return float(f"{RATE_SHARE * ceiling_rate(profile, load):.3g}")


def predict(
    profile: DecodeProfile, load: DecoderLoad, *, requests: int = PREDICT_REQUESTS
) -> ServingWhatIf:
    """Serving `requests` Poisson arrivals of this load, predicted at the profile's costs."""
    return what_if(
        profile,
        load.policy,
        rate=load.rate,
        prompt_tokens=load.prompt_tokens,
        new_tokens=load.new_tokens,
        requests=requests,
    )


def headline(whatif: ServingWhatIf) -> dict[str, float]:
    """The prediction's figures as the page shows them, by label (units in the label)."""
    figures = whatif.predicted
    return {
        "Tokens/s": figures.tokens_per_s,
        "TTFT p50 (ms)": figures.ttft_p50_ms,
        "TTFT p99 (ms)": figures.ttft_p99_ms,
        "Time per token p50 (ms)": figures.tpot_p50_ms,
        "Time per token p99 (ms)": figures.tpot_p99_ms,
        "Mean batch": figures.mean_batch,
        "Continuous ceiling (tokens/s)": whatif.ceiling_tokens_per_s,
    }


def load_line(whatif: ServingWhatIf, profile: DecodeProfile) -> str:
    """What the prediction was asked and rests on, in one sentence."""
    policy = whatif.policy
    timeout = f", {policy.timeout_ms:g} ms timeout" if policy.batching == "static" else ""
    threads = f"{profile.threads} threads" if profile.threads else "the runtime's threads"
    longest = profile.prompt_lengths[-1]
    beyond = (
        f" Prefills past {longest} tokens extend the last measured slope."
        if whatif.prompt_tokens > longest
        else ""
    )
    return (
        f"{whatif.requests} Poisson arrivals at {whatif.rate:g} requests/s of "
        f"{whatif.prompt_tokens} prompt + {whatif.new_tokens} new tokens, {policy.batching} "
        f"batching up to {policy.max_batch}{timeout}: they ask "
        f"{whatif.offered_tokens_per_s:.1f} tokens/s. Predicted from the profile timed on "
        f"{profile.backend or 'the backend'} with {threads}.{beyond}"
    )


def saturation_line(whatif: ServingWhatIf) -> str | None:
    """A warning when arrivals outpace the server (the queue keeps growing), else None."""
    if not whatif.predicted.saturated:
        return None
    ceiling = whatif.ceiling_tokens_per_s / whatif.new_tokens
    static = (
        " Static batching serves less than that: a batch decodes to its end before anyone joins it."
        if whatif.policy.batching == "static"
        else ""
    )
    return (
        f"Requests arrive faster than this server can serve them: the queue keeps growing, so "
        f"TTFT has no steady value. Continuous batching kept full serves at most "
        f"{ceiling:.3g} requests/s of these lengths at max batch {whatif.policy.max_batch}."
        f"{static} Raise the max batch or lower the rate."
    )


def rate_sweep(
    profile: DecodeProfile, load: DecoderLoad, *, requests: int | None = None
) -> pd.DataFrame:
    """Predicted tokens/s, time per token p99 and TTFT p99 for static and continuous batching
    (the load's max batch and timeout) at SWEEP_SHARES of the ceiling's arrival rate."""
    top = ceiling_rate(profile, load)
    fewest, most = SWEEP_REQUESTS
    requests = requests or min(most, max(fewest, SWEEP_TOKENS // load.new_tokens))
    rows = []
    for batching in ("static", "continuous"):
        policy = load.policy.model_copy(update={"batching": batching})
        for share in SWEEP_SHARES:
            rate = float(f"{share * top:.3g}")
            point = load.model_copy(update={"rate": rate, "policy": policy})
            figures = predict(profile, point, requests=requests).predicted
            rows.append(
                {
                    "batching": batching,
                    "rate": rate,
                    "tokens_per_s": figures.tokens_per_s,
                    "tpot_p99_ms": figures.tpot_p99_ms,
                    "ttft_p99_ms": figures.ttft_p99_ms,
                    "saturated": figures.saturated,
                }
            )
    return pd.DataFrame(rows)


def profile_rows(profile: DecodeProfile) -> pd.DataFrame:
    """The measured profile per batch size: ms per step, tokens/s, and the spread of the
    timed steps (p50 / p99 ms) where the profile kept them."""
    spread = {t.batch: t for t in profile.decode_timings()} if profile.step_runs_ms else {}
    rows = []
    for size, ms in zip(profile.batch_sizes, profile.step_ms, strict=True):
        timed = spread.get(size)
        rows.append(
            {
                "batch": size,
                "ms per step": ms,
                "tokens/s": profile.tokens_per_s(size),
                "ms per step p50": timed.ms_per_token_p50 if timed else None,
                "ms per step p99": timed.ms_per_token_p99 if timed else None,
            }
        )
    return pd.DataFrame(rows)
