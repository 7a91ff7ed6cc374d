"""Auto's rule for decoders: the fastest variant at batch 1 whose perplexity stays in budget.

Decoding at batch 1 is what a chat user waits on (one token per step, each step reads every
weight once), so variants are ranked by tokens per second there by default; on request by time
to first token (a long prompt's wait) or by tokens per second at batch N (a server's
throughput). A variant passes when its perplexity on the evaluation text is at most
(1 + budget) x the FP32 original's, measured in the same run, it meets every other limit of the
run's budget (`missed` empty), and its timing says it is faster than the original at the ranked
figure (`faster`: the interval, not one noisy number). The original always passes, so there is
always a choice.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_PERPLEXITY_BUDGET = 0.05
"""Largest relative perplexity increase over FP32 a variant may have (5 %)."""

RankBy = Literal["tokens_per_s", "ttft", "throughput"]
"""What Auto ranks decoders by: tokens/s at batch 1, time to first token, tokens/s at batch N."""
RANK_LABELS: dict[str, str] = {
    "tokens_per_s": "decoding at batch 1",
    "ttft": "time to first token",
    "throughput": "throughput at batch N",
}


class DecoderCandidate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Recipe name, e.g. 'int4_weight_only'.")
    tokens_per_s: float = Field(description="Greedy decoding speed at batch 1.")
    perplexity_increase: float = Field(description="perplexity / FP32's - 1, same text.")
    ttft_ms: float | None = Field(default=None, description="Time to first token.")
    throughput: float | None = Field(
        default=None, description="Greedy decoding tokens/s at the run's batch N."
    )
    faster: bool = Field(
        default=True,
        description="Its timing's interval says it is faster than the original at the ranked "
        "figure; False: not significantly (never chosen over the original).",
    )
    missed: str = Field(
        default="", description="Another limit of the budget it missed, in words; '' = none."
    )


class DecoderChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")

    chosen: str
    reasons: dict[str, str] = Field(description="Candidate -> why it was or was not chosen.")


def fastest_within_budget(
    candidates: list[DecoderCandidate],
    original: str,
    *,
    budget: float = DEFAULT_PERPLEXITY_BUDGET,
    rank_by: RankBy = "tokens_per_s",
) -> DecoderChoice:
    """The candidate fastest by `rank_by` among those that pass (module docstring);
    `original` (a name among `candidates`) passes whatever its numbers."""
    passing = [c for c in candidates if c.name == original or _why_out(c, budget) is None]
    best = max(passing, key=lambda c: speed(c, rank_by))
    return DecoderChoice(
        chosen=best.name,
        reasons={c.name: _reason(c, best, original, budget, rank_by) for c in candidates},
    )


def speed(candidate: DecoderCandidate, rank_by: RankBy) -> float:
    """The ranked figure, higher is faster (TTFT negated); a figure not measured ranks last."""
    if rank_by == "ttft":
        return -candidate.ttft_ms if candidate.ttft_ms is not None else float("-inf")
    if rank_by == "throughput":
        return candidate.throughput if candidate.throughput is not None else float("-inf")
    return candidate.tokens_per_s


def _why_out(c: DecoderCandidate, budget: float) -> str | None:
    if c.perplexity_increase > budget:
        return f"over the {budget:.0%} budget"
    if c.missed:
        return f"over budget: {c.missed}"
    if not c.faster:
        return "not significantly faster than the original"
    return None


def _shown(c: DecoderCandidate, rank_by: RankBy) -> str:
    if rank_by == "ttft":
        return f"{c.ttft_ms:.2f} ms to the first token" if c.ttft_ms is not None else "no TTFT"
    if rank_by == "throughput":
        return f"{c.throughput:.1f} tokens/s at batch N" if c.throughput is not None else "?"
    return f"{c.tokens_per_s:.1f} tokens/s"


def _reason(
    c: DecoderCandidate, best: DecoderCandidate, original: str, budget: float, rank_by: RankBy
) -> str:
    increase = f"perplexity {c.perplexity_increase:+.1%}"
    out = _why_out(c, budget) if c.name != original else None
    if out is not None:
        return f"{increase}, {out}"
    if c is best:
        return f"{increase}, fastest in budget at {_shown(c, rank_by)}"
    return f"{increase}, {_shown(c, rank_by)}; {best.name} is faster ({_shown(best, rank_by)})"
