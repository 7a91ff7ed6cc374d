"""Budgets in a task's terms: each metric's direction decides, unknown metrics are named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from optimize_models import near_tie_classifier

from optistudio.core.data.datasets import open_dataset
from optistudio.core.errors import InvalidSpec
from optistudio.core.model.intake import inspect_model
from optistudio.core.numerics.accuracy import (
    AccuracyBudget,
    AccuracyReport,
    TaskBudget,
    within_budget,
)
from optistudio.core.numerics.evaluators.base import EvaluatorInfo, MetricInfo
from optistudio.core.optimize.run import OptimizeSpec, task_judge

TEXT = EvaluatorInfo(
    name="text_test",
    label="Text (test)",
    description="a task for these tests",
    metrics=[
        MetricInfo(name="string_agreement", label="String agreement", higher_is_better=True),
        MetricInfo(name="cer", label="CER", higher_is_better=False),
        MetricInfo(
            name="accuracy_drop",
            label="Accuracy drop",
            higher_is_better=False,
            unit="points",
            needs_labels=True,
        ),
    ],
    default_budget={"string_agreement": 0.99, "accuracy_drop": 0.01},
    implementation="unused:Unused",
)


def report(**metrics: float) -> AccuracyReport:
    return AccuracyReport(
        samples=10,
        data="user",
        max_abs_error=0.5,
        mean_abs_error=0.01,
        mean_cosine=0.999,  # a cosine budget would pass every one of these
        min_cosine=0.99,
        per_output_max_abs_error={"y": 0.5},
        nan_or_inf=False,
        task="text_test",
        task_metrics=metrics,
    )


def test_the_task_metric_judges_not_the_cosine() -> None:
    budget = TaskBudget(TEXT, {"string_agreement": 0.99})

    ok, why = within_budget(report(string_agreement=0.71, cer=0.2), AccuracyBudget(), budget)

    assert not ok and "string_agreement 71.00% < 99.00%" in why


def test_a_lower_is_better_metric_passes_below_its_limit() -> None:
    budget = TaskBudget(TEXT, {"cer": 0.05, "min_cosine": 0.98})

    ok, why = within_budget(report(string_agreement=0.9, cer=0.01), AccuracyBudget(), budget)

    assert ok and "cer 1.00% <= 5.00%" in why and "min_cosine 0.99 >= 0.98" in why


def test_a_default_limit_that_needs_labels_is_skipped_without_them_a_users_is_not() -> None:
    defaults = TaskBudget(TEXT, dict(TEXT.default_budget), defaulted=True)
    users = TaskBudget(TEXT, {"accuracy_drop": 0.01})

    assert within_budget(report(string_agreement=1.0), AccuracyBudget(), defaults)[0]
    ok, why = within_budget(report(string_agreement=1.0), AccuracyBudget(), users)
    assert ok and "accuracy_drop not measured (it needs labels)" in why


def test_nan_fails_whatever_the_task_says() -> None:
    broken = report(string_agreement=1.0).model_copy(update={"nan_or_inf": True})

    assert not within_budget(broken, AccuracyBudget(), TaskBudget(TEXT, {"cer": 1.0}))[0]


def test_a_budget_naming_no_metric_of_the_task_lists_the_valid_ones() -> None:
    with pytest.raises(InvalidSpec, match="no metric 'top1_drop'. Its metrics: string_agreement"):
        TaskBudget(TEXT, {"top1_drop": 0.01}).check()


def test_labels_switch_the_default_budget_to_accuracy_against_them(tmp_path: Path) -> None:
    model = near_tie_classifier(tmp_path / "c.onnx")
    np.savez(tmp_path / "x.npz", x=np.random.default_rng(0).standard_normal((8, 32), np.float32))
    np.save(tmp_path / "y.npy", np.zeros(8, np.int64))
    data = open_dataset(tmp_path / "x.npz", inspect_model(model).inputs)

    plain = task_judge(model, OptimizeSpec(), data, None)[1]
    labelled = task_judge(model, OptimizeSpec(), data, tmp_path / "y.npy")[1]

    assert plain.limits == {"clear_top1_disagreement": 0.01, "top1_disagreement": 0.05}
    assert labelled.limits == {"top1_drop": 0.01}
