"""The built-in evaluators come through the entry-point group; their metrics and budgets agree."""

from __future__ import annotations

from importlib.metadata import entry_points

import numpy as np
import pytest

from optistudio.core.numerics.evaluators.base import Evaluator, Recognition, evaluators

BUILT_IN = {
    "binary",
    "classification",
    "ctc_text",
    "detection_boxes",
    "detection_map",
    "embedding",
    "multilabel",
    "regression",
    "segmentation",
    "text_generation",
}
RNG = np.random.default_rng(7)
EXAMPLES = {  # task: (outputs, one batch of the original's outputs, labels or None)
    "binary": (["p"], {"p": RNG.random((12, 1))}, np.arange(12) % 2),
    "classification": (["p"], {"p": RNG.random((12, 6))}, np.arange(12) % 6),
    "ctc_text": (["p"], {"p": RNG.random((12, 8, 11))}, ["1 2"] * 12),
    "detection_boxes": (
        ["rows"],
        {
            "rows": np.hstack(
                [RNG.random((5, 2)) * 10, RNG.random((5, 2)) * 10 + 20, RNG.random((5, 2))]
            )[None]
        },
        [np.array([[0, 0, 25, 25, 0]], np.float64)],
    ),
    "detection_map": (["map"], {"map": RNG.random((2, 1, 32, 32))}, [np.zeros((0, 5))] * 2),
    "embedding": (["e"], {"e": RNG.standard_normal((12, 4))}, None),
    "multilabel": (["m"], {"m": RNG.random((12, 3, 5))}, None),
    "regression": (["v"], {"v": RNG.random((12, 1))}, RNG.random(12)),
    "segmentation": (["s"], {"s": RNG.random((2, 3, 8, 8))}, np.zeros((2, 8, 8), np.int64)),
    "text_generation": (["logits"], {"logits": RNG.standard_normal((2, 5, 16))}, None),
}


def test_the_built_ins_are_registered_through_entry_points() -> None:
    points = {point.name for point in entry_points(group="optistudio.evaluators")}

    assert points >= BUILT_IN
    assert set(evaluators.names()) >= BUILT_IN


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_each_entry_creates_its_evaluator(name: str) -> None:
    info = evaluators.get(name)

    evaluator = info.create()

    assert isinstance(evaluator, Evaluator)
    assert evaluator.info is info
    assert len({metric.name for metric in info.metrics}) == len(info.metrics)


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_the_default_budget_is_on_a_metric_measured_without_labels(name: str) -> None:
    info = evaluators.get(name)

    for metric_name, limit in info.default_budget.items():
        metric = info.metric(metric_name)
        assert not metric.needs_labels
        assert metric.passes(limit, limit)


@pytest.mark.parametrize(
    ("task", "metric", "value", "limit", "ok"),
    [
        ("ctc_text", "string_agreement", 0.995, 0.99, True),
        ("ctc_text", "string_agreement", 0.98, 0.99, False),
        ("ctc_text", "cer", 0.02, 0.01, False),
        ("classification", "top1_drop", 0.005, 0.01, True),
        ("classification", "top1_drop", 0.02, 0.01, False),
        ("classification", "top1_disagreement", 0.02, 0.01, False),
        ("detection_boxes", "map50_drop", 0.01, 0.005, False),
        ("detection_boxes", "f1", 0.96, 0.95, True),
        ("detection_map", "box_f1", 0.9, 0.95, False),
        ("embedding", "recall_at_10", 0.99, 0.98, True),
        ("segmentation", "miou", 0.9, 0.95, False),
        ("regression", "mean_relative_error", 0.05, 0.01, False),
    ],
)
def test_metric_directions(task: str, metric: str, value: float, limit: float, ok: bool) -> None:
    info = evaluators.get(task).metric(metric)

    assert info.passes(value, limit) is ok
    assert info.sign(ok) in ((">=", "<=") if ok else ("<", ">"))


@pytest.mark.parametrize("labelled", [False, True], ids=["agreement", "labels"])
@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_scores_report_only_declared_metrics_of_their_mode(name: str, labelled: bool) -> None:
    outputs, batch, labels = EXAMPLES[name]
    if labelled and labels is None:
        pytest.skip("this task has no labels mode")
    info = evaluators.get(name)
    tally = info.create().tally(
        Recognition(task=name, reason="t", outputs=outputs), labels if labelled else None
    )
    noisy = {key: value + RNG.standard_normal(value.shape) * 0.05 for key, value in batch.items()}

    tally.add(batch, noisy, first_sample=0)
    score = tally.score()

    declared = {metric.name: metric for metric in info.metrics}
    assert set(score.metrics) <= set(declared)
    assert set(info.default_budget) <= set(score.metrics)
    assert any(declared[key].needs_labels for key in score.metrics) is labelled
    assert score.mode == ("labels" if labelled else "agreement")
    assert all(np.isfinite(value) for value in score.metrics.values())
    assert len(score.worst) <= 20
