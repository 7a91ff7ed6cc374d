"""Notes that are true: the QAT note counts only INT8 variants that were measured and missed,
and the headline names the fastest variant Auto left out, with why."""

from __future__ import annotations

from pathlib import Path

import pytest

from optistudio.core.errors import ErrorCode, ErrorInfo, PassFailed
from optistudio.core.measure.compare import ComparisonSpec
from optistudio.core.numerics.accuracy import AccuracyBudget, AccuracyReport
from optistudio.core.optimize.headline import headline, left_out
from optistudio.core.optimize.recipes import BUILTIN_RECIPES
from optistudio.core.optimize.run import OptimizeReport, OptimizeSpec, VariantResult, optimize

QUICK = ComparisonSpec(min_pairs=20, min_seconds=0.2, max_seconds=3.0, threads=1)
MISSED = "Every post-training INT8 candidate missed the accuracy budget"


def timed(
    name: str,
    speedup: float,
    *,
    ok: bool = True,
    verdict: str = "faster",
    random: bool = False,
    note: str = "within budget: mean cosine 0.99990 >= 0.99",
    spread: float = 0.02,
) -> VariantResult:
    """A made variant as the run leaves it: judged (an accuracy report) and timed."""
    ratio = 1 / speedup
    return VariantResult(
        recipe=BUILTIN_RECIPES[name],
        precision="int8",
        accuracy=AccuracyReport.model_validate(
            {"samples": 4, "data": "synthetic", "mean_cosine": 0.9999, "min_cosine": 0.9998}
            | {"max_abs_error": 0.01, "mean_abs_error": 0.001, "nan_or_inf": False}
            | {"per_output_max_abs_error": {"y": 0.01}}
        ),
        within_budget=ok,
        budget_note=note,
        calibrated_on_random=random,
        ratio=ratio,
        ratio_low=ratio * (1 - spread),
        ratio_high=ratio * (1 + spread),
        verdict=verdict,
        speedup=speedup,
    )


def failed(name: str, message: str) -> VariantResult:
    variant = VariantResult(recipe=BUILTIN_RECIPES[name], precision="int8")
    variant.fail(ErrorInfo(code=ErrorCode.pass_failed, message=message))
    return variant


@pytest.fixture
def no_int8(monkeypatch: pytest.MonkeyPatch) -> None:
    from optistudio.core.passes import quantize

    def broken(*args: object, **kwargs: object) -> None:
        raise PassFailed("ONNX Runtime could not quantize this model: boom")

    monkeypatch.setattr(quantize, "run_int8_dynamic", broken)


def auto_run(model: Path, out: Path, **spec: object) -> OptimizeReport:
    """Auto on ONNX Runtime: graph and int8_dynamic on the tiny MLP."""
    settings = {"recipes": ["auto"], "target_backend": "onnxruntime", "comparison": QUICK}
    return optimize(model, OptimizeSpec.model_validate(settings | spec), out_dir=out)


@pytest.mark.usefixtures("no_int8")
def test_int8_that_failed_outright_is_named_as_failed_never_as_a_miss(
    tiny_model: Path, tmp_path: Path
) -> None:
    report = auto_run(tiny_model, tmp_path / "out", accuracy_samples=2)

    int8 = next(v for v in report.variants if v.recipe.name == "int8_dynamic")
    assert int8.status == "failed" and not int8.judged
    assert not any("missed" in note for note in report.notes)
    [note] = [n for n in report.notes if "INT8" in n and "failed outright" in n]
    assert "INT8 dynamic: ONNX Runtime could not quantize this model: boom" in note
    assert "give training data" not in note


def test_int8_that_was_measured_and_missed_gives_the_qat_note(
    tiny_model: Path, tmp_path: Path
) -> None:
    strict = AccuracyBudget(min_cosine=1.0, max_top1_drop=None)  # INT8 cannot keep it

    report = auto_run(tiny_model, tmp_path / "out", accuracy_samples=2, budget=strict)

    int8 = next(v for v in report.variants if v.recipe.name == "int8_dynamic")
    assert int8.judged and not int8.within_budget
    assert any(note.startswith(f"{MISSED}; give training data") for note in report.notes)


def test_the_run_carries_a_headline_that_matches_its_choice(
    tiny_model: Path, tmp_path: Path
) -> None:
    report = auto_run(tiny_model, tmp_path / "out", accuracy_samples=2)

    assert report.headline == headline(report.variants, report.chosen)
    assert report.headline.startswith(("Chosen: ", "Keep the original"))


@pytest.mark.parametrize(
    ("variants", "chosen", "says"),
    [
        (
            [timed("int8_nncf", 2.23, random=True), timed("int8_static", 1.75, random=True)],
            None,
            "Keep the original: no variant is significantly faster within the accuracy "
            "budget. INT8 NNCF (for OpenVINO) 2.23x left out: calibrated on random inputs; "
            "give data to confirm. (1 more faster variant(s) left out too.)",
        ),
        (
            [
                timed("graph", 1.20),
                timed(
                    "int8_static",
                    1.90,
                    ok=False,
                    note="over budget: mean cosine 0.97120 < 0.99",
                ),
            ],
            "graph",
            "1.90x left out: missed the accuracy budget (mean cosine 0.97120 < 0.99).",
        ),
        (
            [timed("graph", 1.20), timed("fusion", 1.40, verdict="no significant difference")],
            "graph",
            "1.40x left out: not significantly faster (95 % CI 1.37-1.43x).",
        ),
        (
            [
                timed("graph", 1.20),
                timed("fusion", 1.60, verdict="no significant difference", spread=0.3),
            ],
            "graph",
            "its timing was too unsteady to tell.",
        ),
        (
            [timed("graph", 1.20), timed("int8_dynamic", 1.10, ok=False)],
            "graph",
            "Chosen: Graph optimization, 1.20x faster (95 % CI 1.18-1.22x) cosine 0.9999.",
        ),
        (
            [timed("graph", 1.01, verdict="no significant difference")],
            None,
            "Keep the original: no variant is significantly faster within the accuracy budget.",
        ),
    ],
    ids=[
        "random-calibration",
        "missed-budget",
        "not-significant",
        "unsteady",
        "chosen-fastest",
        "within-the-margin",
    ],
)
def test_the_headline_names_the_fastest_variant_left_out_and_why(
    variants: list[VariantResult], chosen: str | None, says: str
) -> None:
    said = headline(variants, chosen)

    assert said.endswith(says)
    if chosen:
        assert said.startswith(f"Chosen: {BUILTIN_RECIPES[chosen].label}, 1.20x faster")


def test_a_variant_that_failed_after_it_was_timed_is_left_out_as_failed() -> None:
    stored = timed("int8_static", 1.80)
    stored.fail(ErrorInfo(code=ErrorCode.artifact_store_failed, message="Made, but not stored."))

    out = left_out([timed("graph", 1.20), stored, failed("int8_nncf", "NNCF broke")], "graph")

    assert out is not None and (out.recipe, out.speedup) == ("int8_static", 1.80)
    assert out.reason == "failed: Made, but not stored." and out.others == 0


def test_a_run_of_failures_says_none_could_be_made() -> None:
    said = headline([failed("int8_nncf", "a"), failed("int8_static", "b")], None)

    assert said == "No variant could be made: 2 recipe(s) failed."


def test_speed_only_does_not_blame_random_calibration() -> None:
    random = timed("int8_nncf", 2.0, random=True, verdict="no significant difference")

    out = left_out([random], None, speed_only=True)

    assert out is not None and "random" not in out.reason
    assert out.reason.startswith("not significantly faster")


def test_a_result_stored_before_headlines_reads_with_empty_defaults() -> None:
    stored: dict[str, object] = {"spec": {"recipes": ["graph"]}, "data": "synthetic"}

    report = OptimizeReport.model_validate(stored | {"variants": [], "chosen": None})

    assert (report.headline, report.left_out) == ("", None)
    assert report.said() == "Keep the original: no recipe was run."
