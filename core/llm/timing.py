"""How fast a decoder serves: time to first token and decoding speed.

- ttft_ms: milliseconds from feeding a prompt of P tokens (with an empty cache) to having the
  first new token, the median of `repeats` prefills;
- decoding at batch B: N greedy steps after a short prompt; tokens_per_s = B x steps / their
  seconds, and ms per token p50 / p99 over the steps (each step yields one token per sequence,
  so a step's time is the latency of a token).

The prompts are fixed token ids (seeded): speed does not depend on what the tokens say, and
greedy decoding keeps going whatever it picks. Warm-up steps run before each measure.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.llm.decode import DecoderSession, greedy


class PrefillTiming(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt_tokens: int
    batch: int = 1
    ttft_ms: float = Field(description="Median milliseconds to the first token.")
    repeats: int


class DecodeTiming(BaseModel):
    model_config = ConfigDict(extra="forbid")

    batch: int
    prompt_tokens: int
    steps: int = Field(description="Timed decoding steps (one token per sequence each).")
    tokens_per_s: float
    ms_per_token_p50: float
    ms_per_token_p99: float


def prompt_ids(batch: int, tokens: int, vocab: int, *, seed: int = 0) -> np.ndarray:
    """A fixed prompt [batch, tokens] of ids in 0..vocab-1 (ids 0-3 avoided: often special)."""
    low = 4 if vocab > 8 else 0
    return np.random.default_rng(seed).integers(low, vocab, size=(batch, tokens), dtype=np.int64)


def time_prefill(
    session: DecoderSession, prompt_tokens: int, vocab: int, *, repeats: int = 5
) -> PrefillTiming:
    """TTFT at batch 1 for a prompt of `prompt_tokens` tokens (after one warm-up)."""
    prompt = prompt_ids(1, prompt_tokens, vocab)
    greedy(session, prompt, 1)
    seconds = [greedy(session, prompt, 1).prefill_s for _ in range(repeats)]
    return PrefillTiming(
        prompt_tokens=prompt_tokens, ttft_ms=float(np.median(seconds)) * 1e3, repeats=repeats
    )


def time_decode(
    session: DecoderSession,
    vocab: int,
    *,
    batch: int = 1,
    steps: int = 64,
    prompt_tokens: int = 16,
    warmup_steps: int = 4,
) -> DecodeTiming:
    """Decoding speed at `batch` over `steps` greedy steps after a `prompt_tokens` prompt."""
    prompt = prompt_ids(batch, prompt_tokens, vocab)
    greedy(session, prompt, warmup_steps + 1)
    generation = greedy(session, prompt, steps + 1)
    per_step = np.array(generation.step_s)
    return DecodeTiming(
        batch=batch,
        prompt_tokens=prompt_tokens,
        steps=steps,
        tokens_per_s=batch * steps / float(per_step.sum()),
        ms_per_token_p50=float(np.percentile(per_step, 50)) * 1e3,
        ms_per_token_p99=float(np.percentile(per_step, 99)) * 1e3,
    )
