"""`optistudio optimize`'s text output says when the variants were judged on built-in samples or
random inputs rather than the user's data, and each variant's row carries its mark."""

from __future__ import annotations

import pytest

from optistudio.cli.optimize import _print_variants
from optistudio.core.numerics.accuracy import AccuracyReport
from optistudio.core.optimize.recipes import BUILTIN_RECIPES
from optistudio.core.optimize.run import OptimizeReport, OptimizeSpec, VariantResult

ACCURACY = AccuracyReport.model_validate(
    {"samples": 4, "data": "builtin", "mean_cosine": 0.999, "min_cosine": 0.998}
    | {"max_abs_error": 0.01, "mean_abs_error": 0.001, "nan_or_inf": False}
    | {"per_output_max_abs_error": {"y": 0.01}}
)


def report(**marks: object) -> OptimizeReport:
    note = "within budget: mean cosine 0.99900 >= 0.99; calibrated and judged on built-in samples, not your data"
    variant = VariantResult(
        recipe=BUILTIN_RECIPES["int8_static"],
        precision="int8",
        accuracy=ACCURACY,
        within_budget=True,
        budget_note=note,
        ratio=0.5,
        ratio_low=0.48,
        ratio_high=0.52,
        verdict="faster",
        speedup=2.0,
        **marks,
    )
    return OptimizeReport(
        spec=OptimizeSpec(), data="built-in samples: x: 4 crops", variants=[variant], chosen=None
    )


@pytest.mark.parametrize(
    ("marks", "says"),
    [
        pytest.param(
            {"builtin_samples": "calibrated and judged"},
            "judged on these built-in samples",
            id="builtin",
        ),
        pytest.param({"calibrated_on_random": True}, "not your data: random inputs", id="random"),
    ],
)
def test_the_table_warns_under_the_data_line(marks, says, capsys) -> None:
    _print_variants(report(**marks))

    lines = capsys.readouterr().out.splitlines()

    assert lines[0].startswith("data: built-in samples") and says in lines[1]
    assert "--calib FILE" in lines[1]


def test_the_users_data_gets_no_warning(capsys) -> None:
    _print_variants(report())

    assert "not your data" not in capsys.readouterr().out.splitlines()[1]
