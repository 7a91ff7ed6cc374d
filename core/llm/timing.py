"""How fast a decoder serves: time to first token and decoding speed.

- ttft_ms: milliseconds from feeding a prompt of P tokens (with an empty cache) to having the
  first new token, the median of `repeats` prefills;
- decoding at batch B: N greedy steps after a short prompt; tokens_per_s = B x steps / their
  seconds, and ms per token p50 / p99 over the steps (each step yields one token per sequence,
  so a step's time is the latency of a token);
- paired decoding of a reference A and a candidate B: pair i is one greedy run of each, back
  to back, A first in even pairs and B first in odd ones (A B B A ...), so a warm-cache or
  frequency advantage of whichever runs second falls on both alike; each run gives one TTFT
  and one mean step time. The ratio of a pair's figures, B over A, cancels noise that hits
  both (optistudio.core.measure.compare states the interval over the pairs).

The prompts are fixed token ids (seeded): speed does not depend on what the tokens say, and
greedy decoding keeps going whatever it picks. Warm-up steps run before each measure.
"""

from __future__ import annotations

import time

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


class PairedDecoding(BaseModel):
    """Interleaved greedy runs of A and B on the same prompt (module docstring)."""

    model_config = ConfigDict(extra="forbid")

    batch: int
    prompt_tokens: int
    steps: int = Field(description="Timed decoding steps of each run (one token a sequence).")
    a_ttft_ms: list[float] = Field(description="A's prefill of each pair, milliseconds.")
    b_ttft_ms: list[float]
    a_step_ms: list[float] = Field(description="A's mean step of each pair, milliseconds.")
    b_step_ms: list[float]
    a_steps_ms: list[float] = Field(description="Every step A timed, for the percentiles.")
    b_steps_ms: list[float]
    seconds: float = Field(description="Seconds spent in the timed pairs.")

    @property
    def pairs(self) -> int:
        return len(self.a_step_ms)


def paired_decoding(
    a: DecoderSession,
    b: DecoderSession,
    vocab: int,
    *,
    batch: int = 1,
    prompt_tokens: int = 32,
    steps: int = 16,
    min_pairs: int = 10,
    min_seconds: float = 1.0,
    max_seconds: float = 15.0,
    warmup_runs: int = 2,
) -> PairedDecoding:
    """Pairs of greedy runs (a `prompt_tokens` prompt, then `steps` timed steps at `batch`)
    until `min_pairs` and `min_seconds` are both reached, or `max_seconds` (at least 2 pairs)."""
    prompt = prompt_ids(batch, prompt_tokens, vocab)
    for _ in range(warmup_runs):
        greedy(a, prompt, steps + 1)
        greedy(b, prompt, steps + 1)
    found: dict[str, list[float]] = {key: [] for key in ("at", "bt", "as", "bs", "aa", "ba")}
    start = time.perf_counter()
    while not _enough(
        len(found["as"]), time.perf_counter() - start, min_pairs, min_seconds, max_seconds
    ):
        order = ("a", "b") if len(found["as"]) % 2 == 0 else ("b", "a")
        for side in order:
            run = greedy(a if side == "a" else b, prompt, steps + 1)
            found[f"{side}t"].append(run.prefill_s * 1e3)
            found[f"{side}s"].append(float(np.mean(run.step_s)) * 1e3)
            found[f"{side}a"] += [s * 1e3 for s in run.step_s]
    return PairedDecoding(
        batch=batch,
        prompt_tokens=prompt_tokens,
        steps=steps,
        a_ttft_ms=found["at"],
        b_ttft_ms=found["bt"],
        a_step_ms=found["as"],
        b_step_ms=found["bs"],
        a_steps_ms=found["aa"],
        b_steps_ms=found["ba"],
        seconds=time.perf_counter() - start,
    )


def _enough(
    pairs: int, elapsed: float, min_pairs: int, min_seconds: float, max_seconds: float
) -> bool:
    if pairs < 2:
        return False
    return elapsed >= max_seconds or (pairs >= min_pairs and elapsed >= min_seconds)
