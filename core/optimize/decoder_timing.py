"""A decoder variant timed as a decoder against its FP32 anchor: TTFT and tokens per second.

Each pair is one greedy run of the anchor and one of the variant, back to back in alternating
order (optistudio.core.llm.timing.paired_decoding): a prompt of P tokens (its prefill is the time
to first token) and S timed steps at batch 1. Per pair, r = t_variant / t_anchor for the mean
step (time per token) and for the prefill; each figure's ratio is the median of its r over the
pairs with a bootstrap interval and a verdict (optistudio.core.measure.compare.
paired_ratio_interval, with the run's confidence and practical margin). Throughput at batch N is
timed the same way, in pairs of its own, when Auto ranks by it.

tokens/s = batch x 1000 / (median step ms); the ms per token p50 / p99 are over every timed step.
The figure Auto ranks by (`DecoderSettings.rank_by`) becomes the variant's ratio, interval and
verdict, so the choice among stored variants (`run.choose`) picks what the decoder rule picks.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.llm.choice import RankBy
from optistudio.core.llm.decode import DecoderSession
from optistudio.core.llm.timing import PairedDecoding, paired_decoding
from optistudio.core.measure.compare import ComparisonSpec, RatioInterval, paired_ratio_interval
from optistudio.core.optimize.spec import DecoderSettings


class DecoderFigures(BaseModel):
    """How a decoder variant serves next to its FP32 original, timed interleaved in one run."""

    model_config = ConfigDict(extra="forbid")

    rank_by: RankBy = Field(description="The figure Auto ranked by (the variant's ratio).")
    prompt_tokens: int = Field(description="Prompt tokens of each timed run.")
    steps: int = Field(description="Greedy steps timed after each prompt.")
    pairs: int = Field(description="Interleaved (original, variant) runs at batch 1.")
    tokens_per_s: float = Field(description="Greedy decoding at batch 1.")
    original_tokens_per_s: float
    ms_per_token_p50: float
    ms_per_token_p99: float
    original_ms_per_token_p50: float
    ttft_ms: float = Field(description="Median time to first token of the prompt.")
    original_ttft_ms: float
    decode: RatioInterval = Field(description="Time per token at batch 1, variant / original.")
    ttft: RatioInterval = Field(description="Time to first token, variant / original.")
    throughput_batch: int | None = Field(default=None, description="N of the throughput.")
    throughput_tokens_per_s: float | None = Field(
        default=None, description="Greedy decoding tokens/s at batch N (ranked by throughput)."
    )
    original_throughput_tokens_per_s: float | None = None
    throughput: RatioInterval | None = Field(
        default=None, description="Time per step at batch N, variant / original."
    )
    size_bytes: int = Field(description="The variant's files on disk.")
    original_size_bytes: int = Field(description="The FP32 original's files on disk.")

    @property
    def size_ratio(self) -> float:
        return self.size_bytes / self.original_size_bytes

    def ranked_ms(self) -> tuple[float, float]:
        """(original, variant) median milliseconds of the ranked figure: per token at batch 1,
        to the first token, or per step at batch N."""
        if self.rank_by == "ttft":
            return self.original_ttft_ms, self.ttft_ms
        if self.throughput_batch and self.throughput_tokens_per_s:
            per_step = self.throughput_batch * 1e3
            original = self.original_throughput_tokens_per_s or self.throughput_tokens_per_s
            return per_step / original, per_step / self.throughput_tokens_per_s
        return 1e3 / self.original_tokens_per_s, 1e3 / self.tokens_per_s

    def ranked(self) -> RatioInterval:
        """The interval of the figure Auto ranks by."""
        if self.rank_by == "ttft":
            return self.ttft
        if self.rank_by == "throughput" and self.throughput is not None:
            return self.throughput
        return self.decode


def time_against_original(
    original: DecoderSession,
    variant: DecoderSession,
    vocab: int,
    settings: DecoderSettings,
    comparison: ComparisonSpec,
    *,
    sizes: tuple[int, int],
) -> DecoderFigures:
    """The variant's figures against the original's (module docstring); `sizes`: (variant,
    original) bytes on disk."""
    single = _pairs(original, variant, vocab, settings, comparison, batch=1)
    figures = DecoderFigures(
        rank_by=settings.rank_by,
        prompt_tokens=single.prompt_tokens,
        steps=single.steps,
        pairs=single.pairs,
        tokens_per_s=_per_second(single.b_step_ms, 1),
        original_tokens_per_s=_per_second(single.a_step_ms, 1),
        ms_per_token_p50=float(np.percentile(single.b_steps_ms, 50)),
        ms_per_token_p99=float(np.percentile(single.b_steps_ms, 99)),
        original_ms_per_token_p50=float(np.percentile(single.a_steps_ms, 50)),
        ttft_ms=float(np.median(single.b_ttft_ms)),
        original_ttft_ms=float(np.median(single.a_ttft_ms)),
        decode=_interval(single.a_step_ms, single.b_step_ms, comparison),
        ttft=_interval(single.a_ttft_ms, single.b_ttft_ms, comparison),
        size_bytes=sizes[0],
        original_size_bytes=sizes[1],
    )
    if settings.rank_by != "throughput":
        return figures
    batched = _pairs(original, variant, vocab, settings, comparison, batch=settings.batch)
    return figures.model_copy(
        update={
            "throughput_batch": settings.batch,
            "throughput_tokens_per_s": _per_second(batched.b_step_ms, settings.batch),
            "original_throughput_tokens_per_s": _per_second(batched.a_step_ms, settings.batch),
            "throughput": _interval(batched.a_step_ms, batched.b_step_ms, comparison),
        }
    )


def _pairs(
    original: DecoderSession,
    variant: DecoderSession,
    vocab: int,
    settings: DecoderSettings,
    comparison: ComparisonSpec,
    *,
    batch: int,
) -> PairedDecoding:
    return paired_decoding(
        original,
        variant,
        vocab,
        batch=batch,
        prompt_tokens=settings.prompt_tokens,
        steps=settings.decode_steps,
        min_pairs=comparison.min_pairs,
        min_seconds=comparison.min_seconds,
        max_seconds=comparison.max_seconds,
        warmup_runs=min(comparison.warmup_runs, 3),
    )


def _per_second(step_ms: list[float], batch: int) -> float:
    return batch * 1e3 / float(np.median(step_ms))


def _interval(a_ms: list[float], b_ms: list[float], comparison: ComparisonSpec) -> RatioInterval:
    return paired_ratio_interval(
        a_ms,
        b_ms,
        confidence=comparison.confidence,
        resamples=comparison.resamples,
        seed=comparison.seed,
        margin=comparison.min_effect,
    )
