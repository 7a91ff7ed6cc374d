"""More rounds for the candidates whose first interval could not tell: which are timed again,
in what order, within which caps, and what the variant, the notes and the headline then say."""

from __future__ import annotations

from pathlib import Path

import pytest

from optistudio.core.measure.compare import FASTER, ComparisonSpec
from optistudio.core.numerics.accuracy import AccuracyReport
from optistudio.core.optimize.headline import headline
from optistudio.core.optimize.recipes import BUILTIN_RECIPES
from optistudio.core.optimize.run import choose
from optistudio.core.optimize.spec import OptimizeSpec, UnsteadyTiming
from optistudio.core.optimize.unsteady import resolve_unsteady, timing_notes, unresolved
from optistudio.core.optimize.variant import VariantResult
from tests.core.measure.test_resolve import matmul_chain

ACCURACY = AccuracyReport.model_validate(
    {"samples": 4, "data": "synthetic", "mean_cosine": 0.9999, "min_cosine": 0.9998}
    | {"max_abs_error": 0.01, "mean_abs_error": 0.001, "nan_or_inf": False}
    | {"per_output_max_abs_error": {"y": 0.01}}
)


def first_look(
    name: str, path: Path | None, ratio: float, low: float, high: float, *, ok: bool = True
) -> VariantResult:
    """A made, judged variant as its first timing left it."""
    return VariantResult(
        recipe=BUILTIN_RECIPES[name],
        precision="fp32",
        path=str(path) if path else "unused.onnx",
        accuracy=ACCURACY,
        within_budget=ok,
        budget_note="within budget",
        ratio=ratio,
        ratio_low=low,
        ratio_high=high,
        verdict=FASTER if high < 0.98 else "no significant difference",
        speedup=1 / ratio,
    )


def spec(**caps: float) -> OptimizeSpec:
    return OptimizeSpec(
        comparison=ComparisonSpec(warmup_runs=2, batch_size=64),
        unsteady_timing=UnsteadyTiming(**caps),
    )


@pytest.fixture
def heavy(tmp_path: Path) -> Path:
    return matmul_chain(tmp_path / "heavy.onnx", 8)


@pytest.fixture
def light(tmp_path: Path) -> Path:
    return matmul_chain(tmp_path / "light.onnx", 1)


def test_only_candidates_that_straddle_the_threshold_are_timed_again() -> None:
    straddling = first_look("fp32", None, 0.95, 0.90, 1.01)
    over_budget = first_look("graph", None, 0.95, 0.90, 1.01, ok=False)
    resolved_faster = first_look("int8_dynamic", None, 0.70, 0.65, 0.75)
    resolved_not_faster = first_look("int8_static", None, 1.00, 0.99, 1.01)

    found = unresolved([straddling, over_budget, resolved_faster, resolved_not_faster], spec())

    assert found == [straddling]


@pytest.mark.timing
def test_a_straddling_candidate_clearly_faster_resolves_and_is_chosen(
    heavy: Path, light: Path
) -> None:
    variant = first_look("fp32", light, 0.95, 0.60, 1.10)  # a noisy first look

    resolve_unsteady(heavy, [variant], spec())

    assert variant.verdict == FASTER and variant.ratio_high is not None
    assert variant.ratio_high < 0.98
    assert variant.speedup is not None and variant.speedup > 1.0
    assert variant.timing_note.startswith("resolved after ")
    assert variant.timing_note.endswith(": faster")
    assert choose([variant]) is variant
    said = headline([variant], variant.recipe.name)
    assert said.startswith("Chosen: FP32 as it is, ")
    assert f", timing {variant.timing_note}." in said
    assert timing_notes([variant]) == [
        "More rounds for FP32 as it is, whose first interval could not tell: "
        f"{variant.timing_note}."
    ]


@pytest.mark.timing
def test_the_job_cap_goes_to_the_most_promising_first(heavy: Path, light: Path) -> None:
    # 12 rounds, the first look, take at least 12 x 2 blocks x 50 ms: more than the job's 0.5 s
    promising = first_look("fp32", light, 0.93, 0.60, 1.10)
    next_one = first_look("graph", light, 0.96, 0.60, 1.10)

    resolve_unsteady(heavy, [next_one, promising], spec(job_seconds=0.5))

    # the cap's own look may settle it (8 one-thread rounds did beside a busy core): either way
    # the rounds went to it, and none were left for the next one
    said = promising.timing_note
    assert said.startswith("still unresolved after the 0.5 s cap (") or said.startswith(
        "resolved after "
    )
    # the next one got no rounds: the cap went to the first, or the first resolved faster than
    # the next one's interval could reach (then it is skipped, its note empty)
    assert next_one.timing_note in (
        "still unresolved: the run's 0.5 s for more rounds went to more promising candidates",
        "" if said.startswith("resolved after ") and (promising.ratio or 1.0) <= 0.60 else None,
    )
    assert (next_one.ratio, next_one.ratio_low, next_one.ratio_high) == (0.96, 0.60, 1.10)


def test_a_candidate_already_behind_a_faster_one_is_not_timed_again() -> None:
    faster = first_look("int8_dynamic", None, 0.50, 0.45, 0.55)
    behind = first_look("fp32", None, 0.95, 0.90, 1.01)  # its file is never opened

    resolve_unsteady(Path("never-read.onnx"), [faster, behind], spec())

    assert (behind.timing_note, behind.ratio) == ("", 0.95)


def test_caps_of_zero_time_nothing_again() -> None:
    variant = first_look("fp32", None, 0.95, 0.90, 1.01)

    resolve_unsteady(Path("never-read.onnx"), [variant], spec(candidate_seconds=0))

    assert variant.timing_note == ""


def test_headline_says_what_the_rounds_said_of_one_left_out() -> None:
    variant = first_look("fp32", None, 0.80, 0.60, 1.10)
    variant.timing_note = "still unresolved after the 20 s cap (150 more rounds)"

    said = headline([variant], None)

    assert said.endswith(
        "FP32 as it is 1.25x left out: not significantly faster (95 % CI 0.91-1.67x): still "
        "unresolved after the 20 s cap (150 more rounds)."
    )
