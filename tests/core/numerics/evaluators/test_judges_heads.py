"""Heads no task fitted before (a regressor's few values, one logit, sigmoid labels) and the
near-tie rules of CTC strings and text-detection maps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from evaluator_graphs import save, tensor, weight
from onnx import helper

from optistudio.core.numerics.evaluators.base import Recognition, TaskScore, evaluators
from optistudio.core.numerics.evaluators.recognize import model_facts, read_task


def linear(path: Path, values: int, *, name: str = "y", then: str | None = None) -> Path:
    """x [N, 16] -> MatMul -> Add (bias) -> [N, values], maybe through `then` (Sigmoid)."""
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["z" if then else name]),
    ]
    if then:
        nodes.append(helper.make_node(then, ["z"], [name]))
    return save(
        path,
        nodes,
        [tensor("x", ["N", 16])],
        [tensor(name, ["N", values])],
        initializers=[weight("W", (16, values)), weight("b", (values,), seed=1)],
    )


def read(path: Path) -> tuple[str | None, str | None, str]:
    """The task read from the graph, its confidence, and the first line of why."""
    reading = read_task(model_facts(path))
    if reading.found is None:
        return None, None, reading.why_none
    _, recognition = reading.found
    return recognition.task, recognition.confidence, recognition.reason


def test_a_linear_head_of_three_values_is_a_regressor_not_a_classifier(tmp_path: Path) -> None:
    task, confidence, reason = read(linear(tmp_path / "m.onnx", 3, name="dense_2"))

    assert task == "regression"
    assert confidence in ("medium", "high")
    assert "dense_2 [N, 3] after MatMul + bias with no softmax or sigmoid" in reason


def test_ten_logits_stay_a_classifier(tmp_path: Path) -> None:
    assert read(linear(tmp_path / "m.onnx", 10))[0] == "classification"


@pytest.mark.parametrize(
    ("then", "name", "confidence"),
    [("Sigmoid", "y", "medium"), (None, "logit", "medium")],
    ids=["sigmoid", "one-logit"],
)
def test_a_one_value_head_is_a_binary_classifier(
    tmp_path: Path, then: str | None, name: str, confidence: str
) -> None:
    task, read_confidence, reason = read(linear(tmp_path / "m.onnx", 1, name=name, then=then))

    assert (task, read_confidence) == ("binary", confidence)
    assert reason.endswith("a binary classifier")


def test_a_sigmoid_over_labels_is_multilabel(tmp_path: Path) -> None:
    task, confidence, reason = read(linear(tmp_path / "m.onnx", 5, then="Sigmoid"))

    assert (task, confidence) == ("multilabel", "medium")
    assert "y [N, 5] after Sigmoid: a probability per label" in reason


def tallied(task: str, outputs: list[str], ref: dict, cand: dict, labels=None) -> TaskScore:
    evaluator = evaluators.get(task).create()
    tally = evaluator.tally(Recognition(task=task, reason="t", outputs=outputs), labels)
    tally.add(ref, cand, first_sample=0)
    return tally.score()


def passes_default(task: str, score: TaskScore) -> bool:
    info = evaluators.get(task)
    return all(
        info.metric(name).passes(score.metrics[name], limit)
        for name, limit in info.default_budget.items()
    )


def test_multilabel_counts_threshold_flips_near_ties_apart() -> None:
    rng = np.random.default_rng(0)
    ref = np.where(rng.random((40, 8)) < 0.2, 0.9, 0.1)  # a fifth of the labels on
    ref[0, 0] = 0.52  # a near-tie, on
    near, clear = ref.copy(), ref.copy()
    near[0, 0] = 0.48
    clear[1, :] = 1.0 - clear[1, :]  # every label of sample 1 flipped, all clear

    same = tallied("multilabel", ["p"], {"p": ref}, {"p": ref})
    nudged = tallied("multilabel", ["p"], {"p": ref}, {"p": near})
    broken = tallied("multilabel", ["p"], {"p": ref}, {"p": clear})

    assert same.metrics["cell_flip_rate"] == 0.0 and passes_default("multilabel", same)
    assert nudged.metrics["cell_flip_rate"] == pytest.approx(1 / 320)
    assert nudged.metrics["clear_cell_flip_rate"] == 0.0
    assert passes_default("multilabel", nudged)
    assert broken.metrics["clear_cell_flip_rate"] == pytest.approx(8 / 320)
    assert not passes_default("multilabel", broken)
    assert broken.worst[0].sample == 1


def test_binary_logits_are_read_through_the_sigmoid_and_ties_void_the_score() -> None:
    logits = np.linspace(-3, 3, 40).reshape(40, 1)
    flipped = logits.copy()
    flipped[0] = 3.0  # a clear flip: the original said sigmoid(-3) = 0.05
    halves = np.full((40, 1), 0.5)  # a Sigmoid of zero logits: every decision a tie

    score = tallied("binary", ["y"], {"y": logits}, {"y": flipped}, labels=np.arange(40) >= 20)
    tied = tallied("binary", ["y"], {"y": halves}, {"y": halves})

    assert score.metrics["flip_rate"] == pytest.approx(1 / 40)
    assert score.metrics["clear_flip_rate"] == pytest.approx(1 / 40)
    assert score.metrics["accuracy_drop"] == pytest.approx(1 / 40)
    assert "y as logits" in score.note
    assert tied.void.startswith("the original's own top two are equal on 40 of 40 cells")


def ctc_scores(samples: int = 20, steps: int = 6, classes: int = 5) -> np.ndarray:
    """Per-step probabilities [N, T, C]: step t of every sample sure of class 1 + t % 4."""
    probs = np.full((samples, steps, classes), 0.025)
    for step in range(steps):
        probs[:, step, 1 + step % 4] = 0.9
    return probs


def test_a_ctc_string_changed_only_at_a_near_tie_step_passes_a_clear_change_fails() -> None:
    ref = ctc_scores()
    ref[0, 2, :] = [0.02, 0.02, 0.02, 0.47, 0.47]  # sample 0, step 2: classes 3 and 4 split
    ref[0, 2, 3] += 0.01  # the original reads class 3, by 0.02
    near = ref.copy()
    near[0, 2, [3, 4]] = [0.46, 0.49]  # the variant reads class 4 at that step
    clear = ref.copy()
    clear[5, 0, [1, 2]] = [0.05, 0.875]  # sample 5, step 0: a sure 1 read as 2

    nudged = tallied("ctc_text", ["p"], {"p": ref}, {"p": near})
    broken = tallied("ctc_text", ["p"], {"p": ref}, {"p": clear})

    assert nudged.metrics["string_agreement"] == pytest.approx(19 / 20)
    assert nudged.metrics["clear_string_agreement"] == 1.0
    assert passes_default("ctc_text", nudged)
    assert "1 string(s) changed only at near-tie steps" in nudged.note
    assert broken.metrics["clear_string_agreement"] == pytest.approx(19 / 20)
    assert not passes_default("ctc_text", broken)


def test_text_map_pixels_near_the_threshold_do_not_count_as_flips() -> None:
    ref = np.zeros((2, 1, 32, 32))
    ref[:, 0, 8:20, 4:28] = 0.9  # one text line per sample
    ref[:, 0, 20:22, 4:28] = 0.32  # its edge, just over the 0.3 threshold
    edge = ref.copy()
    edge[:, 0, 20:22, 4:28] = 0.28  # the variant puts the edge just under it
    gone = ref.copy()
    gone[1] = 0.0  # the variant loses sample 1's line

    nudged = tallied("detection_map", ["map"], {"map": ref}, {"map": edge})
    lost = tallied("detection_map", ["map"], {"map": ref}, {"map": gone})

    assert nudged.metrics["map_iou"] < 1.0
    assert nudged.metrics["clear_map_iou"] == 1.0
    assert nudged.metrics["clear_box_f1"] == 1.0
    assert passes_default("detection_map", nudged)
    assert lost.metrics["clear_box_f1"] == pytest.approx(2 / 3)
    assert not passes_default("detection_map", lost)


def test_a_regressor_of_several_values_is_judged_by_the_relative_error_of_each_sample() -> None:
    ref = np.array([[3.0, 4.0, 0.0], [1.0, 1.0, 1.0]])
    cand = ref + np.array([[0.0, 0.0, 0.05], [0.0, 0.0, 0.0]])

    score = tallied("regression", ["y"], {"y": ref}, {"y": cand})

    assert score.metrics["max_relative_error"] == pytest.approx(0.01)  # |(0, 0, .05)| / 5
    assert score.metrics["mean_relative_error"] == pytest.approx(0.005)
    assert score.worst[0].reference == "[3, 4, 0]"
