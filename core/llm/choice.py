"""Auto's rule for decoders: the fastest variant at batch 1 whose perplexity stays in budget.

Decoding at batch 1 is what a chat user waits on (one token per step, each step reads every
weight once), so variants are ranked by tokens per second there. A variant passes when its
perplexity on the evaluation text is at most (1 + budget) x the FP32 original's, measured in
the same run; the original always passes, so there is always a choice.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_PERPLEXITY_BUDGET = 0.05
"""Largest relative perplexity increase over FP32 a variant may have (5 %)."""


class DecoderCandidate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Recipe name, e.g. 'int4_weight_only'.")
    tokens_per_s: float = Field(description="Greedy decoding speed at batch 1.")
    perplexity_increase: float = Field(description="perplexity / FP32's - 1, same text.")


class DecoderChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")

    chosen: str
    reasons: dict[str, str] = Field(description="Candidate -> why it was or was not chosen.")


def fastest_within_budget(
    candidates: list[DecoderCandidate],
    original: str,
    *,
    budget: float = DEFAULT_PERPLEXITY_BUDGET,
) -> DecoderChoice:
    """The candidate decoding fastest at batch 1 among those within `budget`; `original`
    (a name among `candidates`) passes whatever its numbers."""
    passing = [c for c in candidates if c.name == original or c.perplexity_increase <= budget]
    best = max(passing, key=lambda c: c.tokens_per_s)
    return DecoderChoice(
        chosen=best.name, reasons={c.name: _reason(c, best, original, budget) for c in candidates}
    )


def _reason(c: DecoderCandidate, best: DecoderCandidate, original: str, budget: float) -> str:
    increase = f"perplexity {c.perplexity_increase:+.1%}"
    if c.name != original and c.perplexity_increase > budget:
        return f"{increase}, over the {budget:.0%} budget"
    if c is best:
        return f"{increase}, fastest in budget at {c.tokens_per_s:.1f} tokens/s"
    return f"{increase}, {c.tokens_per_s:.1f} tokens/s < {best.tokens_per_s:.1f}"
