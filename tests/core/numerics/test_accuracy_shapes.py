"""Outputs compared as the models really return them: per sample, from the run's shapes, and a
real mismatch blamed on the variant (outputs_differ), never on the user (invalid_spec)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.data.datasets import SyntheticDataset
from optistudio.core.errors import ErrorCode, OutputsDiffer
from optistudio.core.model.info import TensorSpec
from optistudio.core.model.intake import inspect_model
from optistudio.core.numerics.accuracy import AccuracyBudget, accuracy_report, within_budget
from optistudio.core.numerics.samples import fed_rows, paired_views, sample_axis, sample_view


def reshaped(path: Path, shape: list[int], *, declared: list, x: list, scale: float = 1.0) -> Path:
    """y = Reshape(x * scale, shape), declared as `declared` (which may lie, as real exports
    do: ONNX Runtime returns the real shape and only warns)."""
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "k"], ["scaled"]),
            helper.make_node("Reshape", ["scaled", "s"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, declared)],
        initializer=[
            numpy_helper.from_array(np.array(shape, np.int64), "s"),
            numpy_helper.from_array(np.array(scale, np.float32), "k"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def data_for(model: Path, samples: int = 4) -> SyntheticDataset:
    return SyntheticDataset(inspect_model(model).inputs, samples=samples)


def test_a_fixed_batch_output_that_breaks_its_declaration_is_compared_per_sample(
    tmp_path: Path,
) -> None:
    """The recognizer of the issue, shrunk: declared [1, 16], returns [2, 1, 8]; its variant
    returns [1, 16] as declared. Same values per sample: compared, and the note says why."""
    original = reshaped(tmp_path / "a.onnx", [2, 1, 8], declared=[1, 16], x=[1, 16])
    variant = reshaped(tmp_path / "b.onnx", [1, 16], declared=[1, 16], x=[1, 16])

    report = accuracy_report(original, variant, data_for(original))

    assert report.samples == 4
    assert report.mean_cosine == pytest.approx(1.0) and report.max_abs_error == 0.0
    assert "y declared [1, 16]: the original returns [2, 1, 8], the variant [1, 16]" in report.note
    assert within_budget(report, AccuracyBudget())[0]


def test_per_sample_comparison_still_sees_a_variant_that_computes_otherwise(
    tmp_path: Path,
) -> None:
    original = reshaped(tmp_path / "a.onnx", [2, 1, 8], declared=[1, 16], x=[1, 16])
    variant = reshaped(tmp_path / "b.onnx", [1, 16], declared=[1, 16], x=[1, 16], scale=-1.0)

    report = accuracy_report(original, variant, data_for(original))

    assert report.mean_cosine == pytest.approx(-1.0)
    assert not within_budget(report, AccuracyBudget())[0]


def test_another_number_of_values_is_the_variants_fault(tmp_path: Path) -> None:
    original = reshaped(tmp_path / "a.onnx", [2, 1, 8], declared=[1, 16], x=[1, 16])
    variant = reshaped(tmp_path / "b.onnx", [1, 16], declared=[1, 16], x=[1, 16])
    shorter = _sliced(variant, tmp_path / "c.onnx", 8)

    with pytest.raises(OutputsDiffer, match="holds 8 values for 1 sample") as caught:
        accuracy_report(original, shorter, data_for(original))

    assert caught.value.info().code is ErrorCode.outputs_differ
    assert "variant" in (caught.value.hint or "")


def _sliced(model: Path, path: Path, keep: int) -> Path:
    """The model with its output cut to the first `keep` values of its last axis."""
    proto = onnx.load(str(model))
    graph = proto.graph
    graph.node[-1].output[0] = "full"
    graph.initializer.extend(
        numpy_helper.from_array(np.array([v], np.int64), name)
        for name, v in (("start", 0), ("end", keep), ("axis", 1))
    )
    graph.node.append(helper.make_node("Slice", ["full", "start", "end", "axis"], ["y"]))
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, keep]))
    onnx.save(proto, path)
    return path


def test_a_dynamic_batch_on_axis_one_is_found_from_the_run(tmp_path: Path) -> None:
    """[T, N, C] against [N, T, C]: each sample's values read on the axis holding the
    samples, so a time-first original and a batch-first variant agree exactly."""
    time_first = _time_first(tmp_path / "a.onnx")
    batch_first = reshaped(tmp_path / "b.onnx", [-1, 2, 8], declared=["N", 2, 8], x=["N", 16])
    data = SyntheticDataset(inspect_model(time_first).inputs, samples=6, batch_size=3)

    report = accuracy_report(time_first, batch_first, data)

    assert report.samples == 6 and report.max_abs_error == 0.0
    assert report.min_cosine == pytest.approx(1.0)


def _time_first(path: Path) -> Path:
    """x [N, 16] -> [N, 2, 8] -> Transpose -> [2, N, 8], declared ['N', 16] (a lie)."""
    graph = helper.make_graph(
        [
            helper.make_node("Reshape", ["x", "s"], ["steps"]),
            helper.make_node("Transpose", ["steps"], ["y"], perm=[1, 0, 2]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])],
        initializer=[numpy_helper.from_array(np.array([-1, 2, 8], np.int64), "s")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.mark.parametrize(
    ("shape", "rows", "declared", "axis"),
    [
        ((2, 1, 8), 1, [1, "seqlen"], None),
        ((4, 10), 4, ["N", 10], 0),
        ((7, 4, 37), 4, ["T", "N", 37], 1),
        ((4, 4, 3), 4, [4, "N", 3], 1),
        ((3, 5), 4, [3, 5], None),
    ],
    ids=["one-sample-fed", "batch-first", "time-first", "declared-batch-axis", "not-per-sample"],
)
def test_the_sample_axis_is_read_from_the_real_shape(
    shape: tuple[int, ...], rows: int, declared: list, axis: int | None
) -> None:
    assert sample_axis(shape, rows, declared) == axis
    view = sample_view(np.zeros(shape), rows, declared)
    assert view.shape == ((rows if axis is not None else 1), int(np.prod(shape)) // view.shape[0])


def test_views_of_equal_size_compare_in_row_major_order() -> None:
    values = np.arange(16, dtype=np.float32)

    ref, cand = paired_views("y", values.reshape(4, 4), values.reshape(16), rows=4)

    assert ref.shape == cand.shape == (4, 4) and np.array_equal(ref, cand)


def test_fed_rows_follow_the_batch_axis_of_the_inputs() -> None:
    state = TensorSpec(name="state", dtype="float32", shape=[2, "batch", 8])
    audio = TensorSpec(name="audio", dtype="float32", shape=["batch", "time"])
    batch = {"state": np.zeros((2, 5, 8)), "audio": np.zeros((5, 100))}

    assert fed_rows(batch, [state, audio]) == 5
    assert fed_rows(batch, [state, audio], {"state": None}) == 5
