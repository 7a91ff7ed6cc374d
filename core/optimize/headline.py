"""What an optimization run says about its choice, in one line: the headline.

The headline names the chosen variant with its speedup and interval, or says that the original
stays. A variant is "left out" when its measured speedup beats the chosen one's (or 1x, when
none was chosen) by more than the timing's practical margin m (ComparisonSpec.min_effect:
speedup > bar / (1 - m), as a verdict "faster" needs) and Auto still did not choose it. The
headline then names the fastest of them, its speedup and why, in this order:

- it failed (after it was timed: it could not be stored, say): its error's message;
- it missed the accuracy budget: by what, as the budget check said it;
- it was calibrated on random (synthesised) inputs, or on built-in samples with no task to
  check it, and the run is not speed-only: only the user's data can confirm it
  (optistudio.core.optimize.provenance);
- its interval does not say "faster": not significantly faster (and, when the interval is wider
  than UNSTEADY of the speedup, the timing was too unsteady to tell; when more rounds were
  timed, optistudio.core.optimize.unsteady, what they said: still unresolved after the cap, or
  resolved as not faster by the margin).

A variant judged on built-in samples says so in its reason too.

A variant that failed before it was timed has no speedup and is never "left out": the run lists
it as failed with its error; one not applicable (to this graph, or on its backend) is listed
apart with its sentence (`not_applicable_note`) and counted as no failure. This module reads variants only (`VariantResult` of
optistudio.core.optimize.run), so a result stored before headlines existed gets one too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.llm.choice import RANK_LABELS
from optistudio.core.measure.compare import FASTER, ComparisonSpec
from optistudio.core.optimize.provenance import (
    RANDOM_REASON,
    RANDOM_SUFFIX,
    left_for_data,
    plain_note,
    why_for_data,
)

if TYPE_CHECKING:
    from optistudio.core.optimize.variant import VariantResult

OVER_BUDGET = "over budget: "
"""How `within_budget`'s note starts for a variant that missed."""
__all__ = [
    "RANDOM_REASON",
    "RANDOM_SUFFIX",
    "LeftOut",
    "headline",
    "left_out",
    "not_applicable_note",
    "unmade_counts",
]
UNSTEADY = 0.1
"""An interval wider than this share of the speedup says the timing was unsteady."""
MARGIN: float = ComparisonSpec.model_fields["min_effect"].default
"""The timing's practical margin when the caller has no spec to read it from."""


class LeftOut(BaseModel):
    """The fastest variant Auto did not choose although it measured faster than the choice."""

    model_config = ConfigDict(extra="forbid")

    recipe: str = Field(description="Its recipe name.")
    label: str = Field(description="Its recipe's label, as the headline names it.")
    speedup: float = Field(description="Its measured speedup over the original.")
    reason: str = Field(
        description="Why Auto left it out: failed, missed the accuracy budget (by what), "
        "calibrated on random inputs (or on built-in samples with no task check), or not "
        "significantly faster."
    )
    others: int = Field(
        default=0, description="How many more variants faster than the choice were left out."
    )

    def sentence(self) -> str:
        """'INT8 NNCF 2.23x left out: calibrated on random inputs; give data to confirm.'"""
        more = f" ({self.others} more faster variant(s) left out too.)" if self.others else ""
        return f"{self.label} {self.speedup:.2f}x left out: {self.reason}.{more}"


def left_out(
    variants: Sequence[VariantResult],
    chosen: str | None,
    *,
    speed_only: bool = False,
    margin: float = MARGIN,
) -> LeftOut | None:
    """The fastest variant faster than the chosen one (than 1x when none) by more than the
    `margin` that Auto did not choose, with the reason; None when the choice is the fastest."""
    bar = next((v.speedup for v in variants if v.recipe.name == chosen and v.speedup), 1.0)
    beats = bar / (1 - margin)
    faster = sorted(
        (v for v in variants if v.recipe.name != chosen and v.speedup and v.speedup > beats),
        key=lambda v: -(v.speedup or 0.0),
    )
    if not faster:
        return None
    top = faster[0]
    return LeftOut(
        recipe=top.recipe.name,
        label=top.recipe.label,
        speedup=top.speedup or 0.0,
        reason=why_left_out(top, speed_only=speed_only),
        others=len(faster) - 1,
    )


def why_left_out(variant: VariantResult, *, speed_only: bool = False) -> str:
    """Why `choose` passes over this variant, in words; see the module docstring."""
    if variant.status == "failed":
        return f"failed: {variant.error.message}" if variant.error else "failed"
    reasons = []
    if not variant.within_budget:
        reasons.append(missed_by(variant))
    if left_for_data(variant, speed_only=speed_only):
        reasons.append(why_for_data(variant) or "")
    if variant.verdict != FASTER:
        reasons.append(not_significant(variant))
    if variant.builtin_samples and not any("built-in" in reason for reason in reasons):
        reasons.append(variant.samples_note())
    return "; ".join(reasons) or "not chosen"


def missed_by(variant: VariantResult) -> str:
    """'missed the accuracy budget (mean cosine 0.97120 < 0.99)'."""
    if variant.accuracy is None:
        return "not judged against the accuracy budget"
    note = plain_note(variant).removeprefix(OVER_BUDGET)
    missed = "missed the accuracy budget" + (
        " on built-in samples" if variant.builtin_samples else ""
    )
    return f"{missed} ({note})" if note else missed


def not_significant(variant: VariantResult) -> str:
    """'not significantly faster (95 % CI 0.97-1.80x): its timing was too unsteady to tell'; the
    last part only when the interval is wider than UNSTEADY of the speedup. Timed again in more
    rounds, what they said instead: '...: still unresolved after the 20 s cap (41 more rounds)'."""
    text = f"not significantly faster{_interval(variant, ' ')}"
    if variant.timing_note:
        return f"{text}: {variant.timing_note}"
    low, high = variant.ratio_low, variant.ratio_high
    if low and high and variant.speedup and (1 / low - 1 / high) > UNSTEADY * variant.speedup:
        return text + ": its timing was too unsteady to tell"
    return text


def headline(
    variants: Sequence[VariantResult],
    chosen: str | None,
    *,
    speed_only: bool = False,
    margin: float = MARGIN,
) -> str:
    """The run in one line: the choice and its figures (or keep the original), then the
    fastest variant left out and why, when there is one."""
    best = next((v for v in variants if v.recipe.name == chosen), None)
    if not variants:
        return "Keep the original: no recipe was run."
    if best is None and not any(v.status == "made" for v in variants):
        return f"No variant could be made: {unmade_counts(variants)}."
    lead = (
        f"Chosen: {best.recipe.label}, {figures(best)}{_on_builtin(best)}{_retimed(best)}."
        if best is not None
        else "Keep the original: no variant is significantly faster within the accuracy budget."
    )
    out = left_out(variants, chosen, speed_only=speed_only, margin=margin)
    return lead if out is None else f"{lead} {out.sentence()}"


def unmade_counts(variants: Sequence[VariantResult]) -> str:
    """'2 recipe(s) failed, 3 not applicable to this model or backend' (either part only when
    there are some)."""
    failed = sum(v.status == "failed" for v in variants)
    aside = sum(v.status == "not_applicable" for v in variants)
    parts = [f"{failed} recipe(s) failed"] if failed else []
    parts += [f"{aside} not applicable to this model or backend"] if aside else []
    return ", ".join(parts)


def not_applicable_note(variants: Sequence[VariantResult]) -> str | None:
    """'Not applicable here (not failures): INT8 dynamic (to this graph), FP32 on OpenVINO (on
    openvino).'; None when every recipe applied."""
    aside = [v for v in variants if v.status == "not_applicable"]
    if not aside:
        return None
    named = ", ".join(f"{v.recipe.label} ({v.not_applicable_where()})" for v in aside)
    return f"Not applicable here (not failures; each says why): {named}."


def figures(variant: VariantResult) -> str:
    """'1.85x faster (95 % CI 1.80-1.90x) cosine 0.9995'; a decoder's: 'at decoding at batch 1
    ..., 812.0 vs 387.5 tokens/s, perplexity +0.27%, 16.0 vs 55.1 MB'."""
    parts = [f"{variant.speedup:.2f}x faster" if variant.speedup else "timed"]
    if variant.decoding is not None:
        parts.append(f"at {RANK_LABELS[variant.decoding.rank_by]}")
    interval = _interval(variant)
    if interval:
        parts.append(interval)
    if variant.decoding is not None:
        return " ".join(parts) + _decoder_figures(variant)
    if variant.accuracy is not None:
        parts.append(f"cosine {variant.accuracy.mean_cosine:.4f}")
    return " ".join(parts)


def _decoder_figures(variant: VariantResult) -> str:
    """', 812.0 vs 387.5 tokens/s at batch 1, perplexity +0.27%, 16.0 vs 55.1 MB'."""
    found = variant.decoding
    assert found is not None
    parts = [f"{found.tokens_per_s:.1f} vs {found.original_tokens_per_s:.1f} tokens/s at batch 1"]
    if found.rank_by == "ttft":
        parts.append(f"TTFT {found.ttft_ms:.2f} vs {found.original_ttft_ms:.2f} ms")
    if found.throughput_tokens_per_s and found.original_throughput_tokens_per_s:
        parts.append(
            f"{found.throughput_tokens_per_s:.1f} vs {found.original_throughput_tokens_per_s:.1f}"
            f" tokens/s at batch {found.throughput_batch}"
        )
    increase = variant.accuracy.metric("perplexity_increase") if variant.accuracy else None
    if increase is not None:
        parts.append(f"perplexity {increase:+.2%}")
    parts.append(f"{found.size_bytes / 1e6:.1f} vs {found.original_size_bytes / 1e6:.1f} MB")
    return ", " + ", ".join(parts)


def _retimed(variant: VariantResult) -> str:
    """', timing resolved after 12 more rounds ...' for a choice timed again."""
    return f", timing {variant.timing_note}" if variant.timing_note else ""


def _on_builtin(variant: VariantResult) -> str:
    """', calibrated and judged on built-in samples, not your data' for such a choice."""
    note = variant.samples_note()
    return f", {note}" if note else ""


def _interval(variant: VariantResult, lead: str = "") -> str:
    if not (variant.ratio_low and variant.ratio_high):
        return ""
    return f"{lead}(95 % CI {1 / variant.ratio_high:.2f}-{1 / variant.ratio_low:.2f}x)"
