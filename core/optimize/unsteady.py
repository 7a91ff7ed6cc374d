"""More rounds for the candidates whose first timing could not tell whether they are faster.

After every variant is judged and timed, a candidate Auto could choose (made, within the
accuracy budget, not left out for its data) whose speedup interval straddles the threshold
1 - m that "faster" must clear (m: the comparison's min_effect) is timed again against the
original in more interleaved rounds (optistudio.core.measure.resolve, where the statistics
are) until its interval resolves or a cap passes: at most `UnsteadyTiming.candidate_seconds`
each and `job_seconds` for the run. The most promising (lowest ratio) go first; one whose
first interval already places it behind a candidate measured faster (its lower end at or above
that one's ratio) is not timed again, as more rounds could not make it the choice.

A candidate so timed takes the rounds' ratio, interval and verdict when they reached a look
(each variant's figures stay one measurement), and its `timing_note` says what happened:
resolved after N more rounds, or still unresolved after the cap; the rounds ran on one thread
when the machine was busy, and the note says that too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

from optistudio.core.errors import Cancelled, OptistudioError, TimedOut
from optistudio.core.measure.compare import FASTER, ComparisonSpec, straddles
from optistudio.core.measure.resolve import Resolution, resolve_models
from optistudio.core.model.info import ModelInfo
from optistudio.core.model.intake import inspect_model
from optistudio.core.optimize.provenance import left_for_data
from optistudio.core.optimize.recipes import ANY, REFERENCE_BACKEND
from optistudio.core.optimize.spec import OptimizeSpec
from optistudio.core.optimize.variant import VariantResult
from optistudio.core.progress import ProgressCallback, ignore_progress, scaled

log = logging.getLogger(__name__)

FED_AS_ORIGINAL = (".tflite", ".xml")
"""Variant files fed what the original is fed (their inputs keep its names)."""


def resolve_unsteady(
    model: Path,
    variants: Sequence[VariantResult],
    spec: OptimizeSpec,
    *,
    progress: ProgressCallback | None = None,
) -> None:
    """Time more rounds of each candidate whose interval straddles the threshold, within the
    spec's caps, updating its figures and `timing_note` in place; see the module docstring."""
    caps = spec.unsteady_timing
    report = progress or ignore_progress
    if caps.candidate_seconds <= 0 or caps.job_seconds <= 0:
        return
    info: ModelInfo | None = None  # read once, when a candidate is timed again
    best = min((v.ratio for v in variants if _faster(v, spec)), default=None)
    spent = 0.0
    for variant in sorted(unresolved(variants, spec), key=lambda v: v.ratio or 0.0):
        if best is not None and (variant.ratio_low or 0.0) >= best:
            continue
        left = caps.job_seconds - spent
        if left <= 0:
            variant.timing_note = (
                f"still unresolved: the run's {caps.job_seconds:g} s for more rounds went to "
                "more promising candidates"
            )
            continue
        began = time.perf_counter()
        info = info or inspect_model(model)
        share = scaled(report, 1.0, 1.0, prefix=f"{variant.recipe.label}: more rounds, ")
        _resolve(model, info, variant, spec, min(caps.candidate_seconds, left), share)
        spent += time.perf_counter() - began
        if _faster(variant, spec):
            best = min(best or float("inf"), variant.ratio or float("inf"))


def unresolved(variants: Sequence[VariantResult], spec: OptimizeSpec) -> list[VariantResult]:
    """The candidates Auto could choose whose first interval straddles 1 - min_effect."""
    margin = spec.comparison.min_effect
    return [
        v
        for v in variants
        if _candidate(v, spec)
        and v.ratio_low is not None
        and v.ratio_high is not None
        and straddles(v.ratio_low, v.ratio_high, margin)
    ]


def timing_notes(variants: Sequence[VariantResult]) -> list[str]:
    """One report note per variant timed again: 'More rounds for BF16 on OpenVINO, whose
    first interval could not tell: resolved after 12 more rounds: faster.'"""
    return [
        f"More rounds for {v.recipe.label}, whose first interval could not tell: {v.timing_note}."
        for v in variants
        if v.timing_note
    ]


def _candidate(variant: VariantResult, spec: OptimizeSpec) -> bool:
    return (
        variant.status == "made"
        and variant.path is not None
        and variant.within_budget
        and variant.decoding is None
        and not left_for_data(variant, speed_only=spec.speed_only)
    )


def _faster(variant: VariantResult, spec: OptimizeSpec) -> bool:
    return _candidate(variant, spec) and variant.verdict == FASTER and bool(variant.ratio)


def _resolve(
    model: Path,
    info: ModelInfo,
    variant: VariantResult,
    spec: OptimizeSpec,
    cap_s: float,
    progress: ProgressCallback,
) -> None:
    """Time the variant's rounds and take what they say; an expected error keeps the first
    figures and says why in the note."""
    assert variant.path is not None
    path = Path(variant.path)
    info_b = info if path.suffix in FED_AS_ORIGINAL else None
    try:
        found = resolve_models(
            model,
            path,
            variant_timing(spec, variant),
            cap_s=cap_s,
            info_a=info,
            info_b=info_b,
            progress=progress,
        )
    except (Cancelled, TimedOut):
        raise
    except OptistudioError as exc:
        log.info("more rounds of %s not timed: %s", variant.recipe.name, exc)
        variant.timing_note = f"more rounds could not be timed: {exc.message}"
        return
    adopt(variant, found)


def variant_timing(spec: OptimizeSpec, variant: VariantResult) -> ComparisonSpec:
    """How the run timed the variant: the original on the reference backend (the target's
    when one is set), the variant on its own backend at its recipe's precision."""
    baseline = REFERENCE_BACKEND if spec.target_backend == ANY else spec.target_backend
    return spec.comparison.model_copy(
        update={
            "backend": baseline,
            "candidate_backend": variant.backend,
            "candidate_precision": variant.recipe.precision,
        }
    )


def adopt(variant: VariantResult, found: Resolution) -> None:
    """The rounds' ratio, interval, verdict and medians when they reached a look; the note."""
    variant.timing_note = found.note()
    interval = found.interval
    if interval is None:
        return
    variant.ratio, variant.ratio_low, variant.ratio_high = (
        interval.ratio,
        interval.low,
        interval.high,
    )
    variant.verdict = interval.verdict
    variant.speedup = 1.0 / interval.ratio if interval.ratio else None
    variant.original_p50_ms, variant.variant_p50_ms = found.a_p50_ms, found.b_p50_ms
