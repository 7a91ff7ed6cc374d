"""The numeric floor no task metric overrides, and models whose own outputs tie or never change:
real runs of tiny graphs through ONNX Runtime, judged as an optimize run judges a variant."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from evaluator_graphs import save, tensor
from onnx import numpy_helper

from optistudio.core.data.datasets import SyntheticDataset
from optistudio.core.model.intake import inspect_model
from optistudio.core.numerics.accuracy import (
    AccuracyBudget,
    AccuracyReport,
    TaskBudget,
    TaskJudge,
    accuracy_report,
    within_budget,
)
from optistudio.core.numerics.accuracy_report import constant_notes
from optistudio.core.numerics.evaluators.base import evaluators
from optistudio.core.numerics.evaluators.recognize import (
    constant_warning,
    model_facts,
    recognize_task,
)
from optistudio.services.model_tasks import recognized

CLASSES = 6


def tied_classifier(path: Path) -> Path:
    """x [N, 8] -> |x @ W| + b -> Softmax [N, 6], W's columns 0 and 1 equal, the others zero
    and b lifting classes 0 and 1: the original's top two are equal on every sample, and vary."""
    w = np.random.default_rng(3).standard_normal((8, CLASSES)).astype(np.float32)
    w[:, 1] = w[:, 0]
    w[:, 2:] = 0.0
    b = np.array([1, 1, 0, 0, 0, 0], np.float32)
    consts = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")]
    nodes = [
        ("MatMul", ["x", "W"], ["raw"]),
        ("Abs", ["raw"], ["size"]),
        ("Add", ["size", "b"], ["logits"]),
        ("Softmax", ["logits"], ["probs"]),
    ]
    return _saved(path, nodes, consts, [tensor("probs", ["N", CLASSES])])


def zeroed(path: Path) -> Path:
    """x [N, 8] @ 0 -> [N, 6] zeros: a variant whose every output is 0 (the issue's INT8
    variant of a tied classifier, '1.47x faster ... cosine 0.0000')."""
    w = np.zeros((8, CLASSES), np.float32)
    nodes = [("MatMul", ["x", "W"], ["probs"])]
    return _saved(path, nodes, [numpy_helper.from_array(w, "W")], [tensor("probs", ["N", 6])])


def logits_head(path: Path, *, scale: float = 1.0) -> Path:
    """x [N, 8] @ W + b -> logits [N, 10] (times `scale`): a linear head over ten classes."""
    rng = np.random.default_rng(5)
    consts = [
        numpy_helper.from_array(rng.standard_normal((8, 10)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "b"),
        numpy_helper.from_array(np.float32(scale), "s"),
    ]
    nodes = [("MatMul", ["x", "W"], ["h"]), ("Add", ["h", "b"], ["raw"])]
    nodes.append(("Mul", ["raw", "s"], ["logits"]))
    return _saved(path, nodes, consts, [tensor("logits", ["N", 10])])


def constant_model(path: Path, *, unreached: bool) -> Path:
    """[N, 3] values that never change: 0 * x summed plus a bias (the input reaches the output,
    the values do not move), or `unreached`: a constant the input never reaches at all."""
    bias = numpy_helper.from_array(np.array([0.2, 0.5, 0.3], np.float32), "b")
    if unreached:
        nodes = [("Identity", ["b"], ["y"])]
        return _saved(path, nodes, [bias], [tensor("y", [3])])
    zero = numpy_helper.from_array(np.zeros((8, 3), np.float32), "W")
    nodes = [("MatMul", ["x", "W"], ["h"]), ("Add", ["h", "b"], ["y"])]
    return _saved(path, nodes, [zero, bias], [tensor("y", ["N", 3])])


def _saved(path: Path, nodes: list, consts: list, outputs: list) -> Path:
    from onnx import helper

    made = [helper.make_node(op, inputs, outs) for op, inputs, outs in nodes]
    return save(path, made, [tensor("x", ["N", 8])], outputs, initializers=consts)


def judged(original: Path, variant: Path, task: str = "classification") -> AccuracyReport:
    """The variant judged against the original in `task`, on 32 random samples."""
    info = evaluators.get(task)
    found = recognize_task(model_facts(original), task=task)
    assert found is not None
    data = SyntheticDataset(inspect_model(original).inputs, samples=32, batch_size=8)
    return accuracy_report(original, variant, data, judge=TaskJudge(info.create(), found[1]))


def verdict(report: AccuracyReport, task: str = "classification") -> tuple[bool, str]:
    info = evaluators.get(task)
    budget = TaskBudget(info, dict(info.default_budget), defaulted=True)
    return within_budget(report, AccuracyBudget(), budget)


def test_zeros_over_a_tied_original_pass_top1_yet_fail_the_floor(tmp_path: Path) -> None:
    original = tied_classifier(tmp_path / "a.onnx")
    variant = zeroed(tmp_path / "b.onnx")

    report = judged(original, variant)
    ok, why = verdict(report)

    assert report.task_metrics["top1_agreement"] == 1.0  # argmax of a tie and of zeros: class 0
    assert report.task_void.startswith("the original's own top two are equal on 32 of 32")
    assert report.output_floors["probs"].worst_cosine == 0.0
    assert not ok
    assert "numeric floor: 'probs' worst-sample SNR" in why
    assert "no task metric overrides it" in why
    assert "judged numerically: the original's own top two are equal" in why


def test_a_variant_within_the_task_metric_but_under_the_floor_is_rejected(tmp_path: Path) -> None:
    original = logits_head(tmp_path / "a.onnx")
    tripled = logits_head(tmp_path / "b.onnx", scale=3.0)  # same argmax, three times the logits

    report = judged(original, tripled)
    ok, why = verdict(report)

    assert report.task_metrics["top1_agreement"] == 1.0
    assert report.task_metrics["clear_top1_disagreement"] == 0.0
    assert report.output_floors["logits"].worst_snr_db is not None
    assert report.output_floors["logits"].worst_snr_db < 0  # the error is twice the signal
    assert not ok and "numeric floor: 'logits'" in why


def test_the_floor_passes_the_same_model_and_can_be_switched_off(tmp_path: Path) -> None:
    original = logits_head(tmp_path / "a.onnx")
    tripled = logits_head(tmp_path / "b.onnx", scale=3.0)

    same_ok, same_why = verdict(judged(original, original))
    off = AccuracyBudget(floor_snr_db=None)
    info = evaluators.get("classification")
    budget = TaskBudget(info, dict(info.default_budget), defaulted=True)
    off_ok, _ = within_budget(judged(original, tripled), off, budget)

    assert same_ok and "numeric floor: worst-sample SNR >= 6 dB on every output" in same_why
    assert off_ok


def test_a_report_without_floors_is_judged_as_before() -> None:
    stored = AccuracyReport(
        samples=4,
        data="user",
        max_abs_error=0.0,
        mean_abs_error=0.0,
        mean_cosine=1.0,
        min_cosine=1.0,
        per_output_max_abs_error={},
        nan_or_inf=False,
    )

    ok, why = within_budget(stored, AccuracyBudget())

    assert ok and "numeric floor" not in why


def test_a_task_read_with_low_confidence_is_judged_by_the_numbers_its_metrics_beside() -> None:
    info = evaluators.get("regression")
    report = AccuracyReport(
        samples=4,
        data="user",
        max_abs_error=0.5,
        mean_abs_error=0.1,
        mean_cosine=0.95,
        min_cosine=0.9,
        per_output_max_abs_error={"v": 0.5},
        nan_or_inf=False,
        task="regression",
        task_metrics={"mean_relative_error": 0.001},  # the task's metric would pass
        task_confidence="low",
    )
    defaulted = TaskBudget(info, dict(info.default_budget), defaulted=True)
    users = TaskBudget(info, {"mean_relative_error": 0.01})

    ok, why = within_budget(report, AccuracyBudget(), defaulted)
    user_ok, _ = within_budget(report, AccuracyBudget(), users)

    assert not ok and "mean cosine 0.95000 < 0.99" in why
    assert "judged numerically: Regression was recognized with low confidence" in why
    assert "mean_relative_error 0.001 (limit 0.01)" in why
    assert user_ok  # limits the user set in the task's metrics decide


def test_a_constant_model_is_judged_numerically_and_warned(tmp_path: Path) -> None:
    original = constant_model(tmp_path / "a.onnx", unreached=False)

    report = judged(original, original, task="regression")
    ok, why = verdict(report, task="regression")
    notes = constant_notes([None, report])

    assert report.constant_outputs == ["y"]
    assert ok and "judged numerically: the original's outputs are the same for every input" in why
    assert len(notes) == 1 and "are the same for every one of the 32 inputs" in notes[0]
    assert constant_notes([judged(logits_head(tmp_path / "c.onnx"), tmp_path / "c.onnx")]) == []


def test_outputs_no_input_reaches_are_named_on_the_card(tmp_path: Path) -> None:
    unreached = constant_model(tmp_path / "a.onnx", unreached=True)
    moving = logits_head(tmp_path / "b.onnx")

    facts = model_facts(unreached)
    card = recognized(unreached)

    assert facts.constant_outputs == ["y"]
    assert "No input reaches the model's outputs (y)" in constant_warning(facts)
    assert card.warnings and "every accuracy check compares constants" in card.warnings[0]
    assert model_facts(moving).constant_outputs == []
    assert recognized(moving).warnings == ()
