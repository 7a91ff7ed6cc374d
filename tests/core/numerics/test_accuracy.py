"""Accuracy reports on real ONNX Runtime runs of tiny models, and the budget check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.data.datasets import NpzDataset, SyntheticDataset
from optistudio.core.errors import DataMismatch
from optistudio.core.model.info import TensorSpec
from optistudio.core.numerics.accuracy import (
    SYNTHETIC_NOTE,
    AccuracyBudget,
    AccuracyReport,
    accuracy_report,
    within_budget,
)

X = TensorSpec(name="x", dtype="float32", shape=["batch", 4])


def save(path: Path, nodes: list, initializers: list, *, elem: int = TensorProto.FLOAT) -> Path:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", elem, ["batch", 4])],
        [helper.make_tensor_value_info("y", elem, ["batch", "out"])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def linear(path: Path, weight: np.ndarray) -> Path:
    """y = x @ W: [batch, 4] -> [batch, classes]."""
    initializer = numpy_helper.from_array(weight.astype(np.float32), "W")
    return save(path, [helper.make_node("MatMul", ["x", "W"], ["y"])], [initializer])


def unary(path: Path, op: str, *, elem: int = TensorProto.FLOAT) -> Path:
    return save(path, [helper.make_node(op, ["x"], ["y"])], [], elem=elem)


def user_data(tmp_path: Path, x: np.ndarray, batch_size: int = 3) -> NpzDataset:
    np.savez(tmp_path / "data.npz", x=x.astype(np.float32))
    return NpzDataset(tmp_path / "data.npz", [X], batch_size=batch_size)


WEIGHT = np.random.default_rng(1).standard_normal((4, 4))


def test_identical_models_agree_exactly(tmp_path: Path) -> None:
    model = linear(tmp_path / "m.onnx", WEIGHT)
    progress: list[float] = []

    report = accuracy_report(
        model,
        model,
        SyntheticDataset([X], samples=10, batch_size=4),
        progress=lambda fraction, _: progress.append(fraction),
    )

    assert report.samples == 10 and report.data == "synthetic"
    assert report.max_abs_error == 0 and report.mean_abs_error == 0
    assert report.mean_cosine == pytest.approx(1) and report.min_cosine == pytest.approx(1)
    assert report.top1_agreement == 1 and report.top1_drop is None
    assert report.per_output_max_abs_error == {"y": 0.0}
    assert not report.nan_or_inf and report.note == SYNTHETIC_NOTE
    assert progress == [0.4, 0.8, 1.0]


def test_perturbed_weights_lower_the_cosine(tmp_path: Path) -> None:
    noise = np.random.default_rng(2).standard_normal((4, 4))
    reference = linear(tmp_path / "a.onnx", WEIGHT)
    candidate = linear(tmp_path / "b.onnx", WEIGHT + 0.5 * noise)

    report = accuracy_report(reference, candidate, SyntheticDataset([X], samples=16))

    assert 0 < report.mean_cosine < 0.99
    assert report.min_cosine <= report.mean_cosine
    assert report.max_abs_error > report.mean_abs_error > 0


def test_labels_give_exact_top1_accuracy_and_drop(tmp_path: Path) -> None:
    classes = np.array([0, 1, 2, 3, 0, 1, 2, 3, 2, 3])
    labels = np.array([0, 1, 2, 3, 0, 1, 2, 3, 0, 0])  # the reference misses the last two
    swap_0_1 = np.eye(4)[[1, 0, 2, 3]]  # the candidate predicts 1 for 0 and 0 for 1
    reference = linear(tmp_path / "a.onnx", np.eye(4))
    candidate = linear(tmp_path / "b.onnx", swap_0_1)

    report = accuracy_report(
        reference, candidate, user_data(tmp_path, np.eye(4)[classes]), labels=labels
    )

    assert report.data == "user"
    assert report.top1_accuracy_reference == pytest.approx(0.8)
    assert report.top1_accuracy_candidate == pytest.approx(0.4)
    assert report.top1_drop == pytest.approx(0.4)
    assert report.top1_agreement == pytest.approx(0.6)
    assert report.mean_cosine == pytest.approx(0.6)  # one-hot rows: cosine 1 or 0


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        pytest.param(
            np.zeros(5, np.int64), "labels have 5 entries but the dataset has 6", id="len"
        ),
        pytest.param(np.full(6, 4), r"class ids in \[0, 4\)", id="range"),
    ],
)
def test_bad_labels(tmp_path: Path, labels: np.ndarray, expected: str) -> None:
    model = linear(tmp_path / "m.onnx", np.eye(4))

    with pytest.raises(DataMismatch, match=expected):
        accuracy_report(
            model, model, user_data(tmp_path, np.eye(4)[[0, 1, 2, 3, 0, 1]]), labels=labels
        )


def test_labels_need_a_classification_output(tmp_path: Path) -> None:
    model = linear(tmp_path / "m.onnx", np.ones((4, 1)))  # [batch, 1]: not classes

    report = accuracy_report(model, model, SyntheticDataset([X], samples=2))
    with pytest.raises(DataMismatch, match="not \\[batch, classes\\]"):
        accuracy_report(model, model, user_data(tmp_path, np.eye(4)), labels=np.zeros(4, int))
    assert report.top1_agreement is None


def test_labels_refused_with_synthetic_data(tmp_path: Path) -> None:
    model = linear(tmp_path / "m.onnx", np.eye(4))

    with pytest.raises(DataMismatch, match="synthetic"):
        accuracy_report(model, model, SyntheticDataset([X], samples=2), labels=np.zeros(2, int))


def test_nan_in_candidate_is_flagged(tmp_path: Path) -> None:
    x = np.array([[1, 4, 9, 16], [-1, 4, 9, 16], [1, 1, 1, 1]], dtype=np.float32)
    reference = unary(tmp_path / "a.onnx", "Identity")
    candidate = unary(tmp_path / "b.onnx", "Sqrt")  # sqrt(-1) is NaN

    report = accuracy_report(reference, candidate, user_data(tmp_path, x))

    assert report.nan_or_inf and report.nonfinite_values == 1
    assert report.min_cosine == 0  # the sample with the NaN
    assert np.isfinite(report.max_abs_error)
    assert not within_budget(report, AccuracyBudget())[0]


def test_candidate_inputs_are_cast_to_its_dtypes(tmp_path: Path) -> None:
    reference = unary(tmp_path / "a.onnx", "Identity")
    candidate = unary(tmp_path / "b.onnx", "Identity", elem=TensorProto.FLOAT16)

    report = accuracy_report(reference, candidate, SyntheticDataset([X], samples=4))

    assert 0 < report.max_abs_error < 1e-2
    assert report.mean_cosine == pytest.approx(1, abs=1e-6)


def report_with(**fields: object) -> AccuracyReport:
    base: dict[str, object] = {
        "samples": 100,
        "data": "user",
        "max_abs_error": 0.1,
        "mean_abs_error": 0.01,
        "mean_cosine": 0.999,
        "min_cosine": 0.99,
        "top1_agreement": 0.995,
        "per_output_max_abs_error": {"y": 0.1},
        "nan_or_inf": False,
    }
    return AccuracyReport.model_validate(base | fields)


@pytest.mark.parametrize(
    ("fields", "ok", "words"),
    [
        pytest.param({}, True, "top-1 disagreement", id="agreement-bounds-drop"),
        pytest.param({"top1_drop": 0.005}, True, "top-1 drop 0.50%", id="drop-ok"),
        pytest.param({"top1_drop": 0.02}, False, "top-1 drop 2.00% > 1.00%", id="drop-over"),
        pytest.param({"mean_cosine": 0.9}, False, "mean cosine 0.90000 < 0.99", id="cosine"),
        pytest.param({"top1_agreement": None}, True, "top-1 not checked", id="no-top1"),
        pytest.param({"nan_or_inf": True, "nonfinite_values": 3}, False, "NaN/Inf (3", id="nan"),
    ],
)
def test_within_budget(fields: dict[str, object], ok: bool, words: str) -> None:
    result, reason = within_budget(report_with(**fields), AccuracyBudget())

    assert result is ok
    assert words in reason


def test_budget_checks_can_be_switched_off() -> None:
    report = report_with(mean_cosine=0.1, top1_drop=0.5)

    assert within_budget(report, AccuracyBudget(min_cosine=None, max_top1_drop=None))[0]


def test_the_budget_can_judge_a_named_output(tmp_path) -> None:
    import onnx
    from onnx import TensorProto, helper

    from optistudio.core.data.datasets import SyntheticDataset
    from optistudio.core.errors import DataMismatch
    from optistudio.core.model.intake import inspect_model
    from optistudio.core.numerics.accuracy import accuracy_report

    def two_outputs(path, scale: float):
        nodes = [
            helper.make_node("Identity", ["x"], ["first"]),
            helper.make_node("Mul", ["x", "s"], ["second"]),
        ]
        graph = helper.make_graph(
            nodes,
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
            [
                helper.make_tensor_value_info("first", TensorProto.FLOAT, ["n", 4]),
                helper.make_tensor_value_info("second", TensorProto.FLOAT, ["n", 4]),
            ],
            initializer=[helper.make_tensor("s", TensorProto.FLOAT, [4], [scale, 1, 1, -1])],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        onnx.save(model, path)
        return path

    reference = two_outputs(tmp_path / "a.onnx", 1.0)
    candidate = two_outputs(tmp_path / "b.onnx", -1.0)  # only the second output differs
    data = SyntheticDataset(inspect_model(reference).inputs, samples=8)

    first = accuracy_report(reference, candidate, data)
    second = accuracy_report(reference, candidate, data, output="second")

    assert first.output == "first" and first.mean_cosine == pytest.approx(1.0)
    assert second.output == "second" and second.mean_cosine < 0.9
    with pytest.raises(DataMismatch, match="no output 'third'. Its outputs: first, second"):
        accuracy_report(reference, candidate, data, output="third")


def normalized(path: Path) -> Path:
    """y = x / ||x||: an embedding ([batch, 4], made by Div)."""
    return save(
        path,
        [
            helper.make_node("ReduceL2", ["x"], ["n"], axes=[1], keepdims=1),
            helper.make_node("Div", ["x", "n"], ["y"]),
        ],
        [],
    )


def test_output_role_follows_the_node_that_makes_the_output(tmp_path: Path) -> None:
    from optistudio.core.numerics.accuracy import output_role

    assert output_role(linear(tmp_path / "c.onnx", WEIGHT), "y") == "classifier"
    assert output_role(normalized(tmp_path / "e.onnx"), "y") == "embedding"
    assert output_role(unary(tmp_path / "r.onnx", "Relu"), "y") == "other"


def test_an_embedding_is_judged_by_cosine_not_top1(tmp_path: Path) -> None:
    model = normalized(tmp_path / "e.onnx")
    report = accuracy_report(model, model, SyntheticDataset([X], samples=8))
    assert report.output_role == "embedding" and report.top1_agreement is None
    ok, note = within_budget(report, AccuracyBudget())
    assert ok and "y is not a classifier's output: it looks like an embedding" in note
    classifier = linear(tmp_path / "c.onnx", WEIGHT)
    assert accuracy_report(classifier, classifier, SyntheticDataset([X], samples=8)).top1_agreement


def test_the_candidate_can_run_on_openvino(tmp_path: Path) -> None:
    from optistudio.core.backends import get_backend

    if not get_backend("openvino").availability().ok:
        pytest.skip("OpenVINO is not available")
    model = linear(tmp_path / "c.onnx", WEIGHT)
    report = accuracy_report(
        model, model, SyntheticDataset([X], samples=8), candidate_backend="openvino"
    )
    assert report.candidate_backend == "openvino"
    assert report.min_cosine > 0.99999 and report.top1_agreement == 1.0
