"""Freeing a batch fixed at 1: the rewrite at batch N against N runs of the original at batch 1,
on models built the way exporters write them, and the graphs it must refuse."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.errors import PassFailed
from optistudio.core.passes.base import PassContext
from optistudio.core.passes.batch_check import check_free_batch
from optistudio.core.passes.dynamic_batch import (
    BATCH_DIM,
    DYNAMIC_BATCH,
    fixed_batch_inputs,
    free_batch,
)

RNG = np.random.default_rng(0)


def weight(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32) * 0.3, name)


def ints(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def save(tmp_path: Path, name: str, nodes, inputs, outputs, inits) -> Path:
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return path


def value(name: str, shape: list[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def cnn_flatten_gemm(tmp_path: Path) -> Path:
    """Conv, then a Reshape to [1, C*H*W] into a Gemm: the classic fixed-batch classifier."""
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Reshape", ["r", "flat"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fcb"], ["y"], transB=1),
    ]
    inits = [weight("w", 4, 3, 3, 3), weight("b", 4), ints("flat", [1, 4 * 6 * 6])]
    inits += [weight("fc", 5, 4 * 6 * 6), weight("fcb", 5)]
    return save(tmp_path, "cnn", nodes, [value("x", [1, 3, 6, 6])], [value("y", [1, 5])], inits)


def lstm_recognizer(tmp_path: Path) -> Path:
    """[1, T, F] -> time-major LSTM with zero initial states made for batch 1 -> per-step
    class scores [1, T, C], as CRNN-style recognizers are exported."""
    steps, features, hidden, classes = 5, 3, 4, 6
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
        helper.make_node("LSTM", ["t", "W", "R", "B", "", "h0", "c0"], ["seq"], hidden_size=hidden),
        helper.make_node("Transpose", ["seq"], ["bt"], perm=[2, 0, 1, 3]),
        helper.make_node("Reshape", ["bt", "rows"], ["h"]),
        helper.make_node("MatMul", ["h", "head"], ["y"]),
    ]
    zeros = np.zeros((1, 1, hidden), dtype=np.float32)
    inits = [
        weight("W", 1, 4 * hidden, features),
        weight("R", 1, 4 * hidden, hidden),
        weight("B", 1, 8 * hidden),
        numpy_helper.from_array(zeros, "h0"),
        numpy_helper.from_array(zeros.copy(), "c0"),
        ints("rows", [1, steps, hidden]),
        weight("head", hidden, classes),
    ]
    inputs, outputs = [value("x", [1, steps, features])], [value("y", [1, steps, classes])]
    return save(tmp_path, "lstm", nodes, inputs, outputs, inits)


def detector_head(tmp_path: Path) -> Path:
    """A YOLO-style head: Conv to anchors x (4 + 1 + classes) channels, a Reshape to
    [1, anchors, 6, cells], a Transpose and a Reshape to [1, -1, 6] rows."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Reshape", ["c", "split"], ["s"]),
        helper.make_node("Transpose", ["s"], ["p"], perm=[0, 1, 3, 2]),
        helper.make_node("Reshape", ["p", "rows"], ["y"]),
    ]
    inits = [weight("w", 18, 3, 1, 1), ints("split", [1, 3, 6, 16]), ints("rows", [1, -1, 6])]
    inputs, outputs = [value("x", [1, 3, 4, 4])], [value("y", [1, 48, 6])]
    return save(tmp_path, "head", nodes, inputs, outputs, inits)


def samples(path: Path, count: int = 3) -> list[dict[str, np.ndarray]]:
    graph = onnx.load(str(path)).graph
    shape = [d.dim_value for d in graph.input[0].type.tensor_type.shape.dim]
    return [{"x": RNG.standard_normal(shape).astype(np.float32)} for _ in range(count)]


@pytest.mark.parametrize("build", [cnn_flatten_gemm, lstm_recognizer, detector_head])
def test_the_freed_batch_gives_what_runs_at_batch_1_give(tmp_path: Path, build) -> None:
    original = build(tmp_path)
    rewrite = free_batch(onnx.load(str(original)))
    freed = tmp_path / "freed.onnx"
    onnx.save(rewrite.model, str(freed))

    assert rewrite.inputs == ["x"]
    assert fixed_batch_inputs(rewrite.model.graph) == []
    out = rewrite.model.graph.output[0].type.tensor_type.shape.dim[0]
    assert out.dim_param == BATCH_DIM
    for count in (2, 4):
        check = check_free_batch(original, freed, samples(original, count), rewrite.inputs)
        assert check.batch == count and check.max_abs_error < 1e-3
        assert f"batch {count} matches {count} runs at batch 1" in check.line()


def test_the_constants_that_pin_the_batch_are_rewritten_not_only_the_declarations(
    tmp_path: Path,
) -> None:
    rewrite = free_batch(onnx.load(str(detector_head(tmp_path))))
    reshapes = [e for e in rewrite.edits if "Reshape to [1, 3, 6, 16]" in e]
    assert reshapes and "leading 1 to 0" in reshapes[0]
    # [1, -1, 6] would put N images' rows into one: its 1 is the batch too.
    assert any("Reshape to [1, -1, 6]" in e for e in rewrite.edits)

    lstm = free_batch(onnx.load(str(lstm_recognizer(tmp_path))))
    assert any("initial_h left out" in e for e in lstm.edits)
    node = next(n for n in lstm.model.graph.node if n.op_type == "LSTM")
    assert list(node.input) == ["t", "W", "R", "B"]


def test_declarations_alone_would_merge_the_samples(tmp_path: Path) -> None:
    # What the rewrite protects against: only the declared dims freed, the Reshape as written.
    original = detector_head(tmp_path)
    model = onnx.load(str(original))
    for v in (*model.graph.input, *model.graph.output):
        v.type.tensor_type.shape.dim[0].dim_param = BATCH_DIM
    naive = tmp_path / "naive.onnx"
    onnx.save(model, str(naive))
    with pytest.raises(PassFailed, match="failed to run|does not carry the batch"):
        check_free_batch(original, naive, samples(original), ["x"])


def _one_node(tmp_path: Path, node, out_shape, inits=()) -> Path:
    return save(tmp_path, "m", [node], [value("x", [1, 4])], [value("y", out_shape)], list(inits))


@pytest.mark.parametrize(
    ("node", "out_shape", "inits", "says"),
    [
        (helper.make_node("ReduceSum", ["x", "ax"], ["y"]), [1, 4], [ints("ax", [0])], "reduces"),
        (
            helper.make_node("Gather", ["x", "i"], ["y"], axis=0),
            [4],
            [numpy_helper.from_array(np.array(0), "i")],
            "rows along the batch",
        ),
        (helper.make_node("Flatten", ["x"], ["y"], axis=0), [1, 4], [], "flattens"),
        (
            helper.make_node("Reshape", ["x", "s"], ["y"]),
            [2, 2],
            [ints("s", [2, 2])],
            "folds the batch",
        ),
    ],
)
def test_a_graph_that_mixes_the_batch_is_refused_naming_the_node(
    tmp_path: Path, node, out_shape, inits, says
) -> None:
    path = _one_node(tmp_path, node, out_shape, inits)
    with pytest.raises(PassFailed, match=says) as raised:
        free_batch(onnx.load(str(path)))
    assert node.op_type in str(raised.value)


def test_a_reshape_that_drops_the_batch_fails_the_check(tmp_path: Path) -> None:
    # [1, 4] -> [-1]: nothing in the graph says it folds the batch; the run shows it.
    path = _one_node(
        tmp_path, helper.make_node("Reshape", ["x", "s"], ["y"]), [4], [ints("s", [-1])]
    )
    rewrite = free_batch(onnx.load(str(path)))
    freed = tmp_path / "freed.onnx"
    onnx.save(rewrite.model, str(freed))
    with pytest.raises(PassFailed, match="output .y. does not carry the batch on one axis"):
        check_free_batch(path, freed, samples(path), rewrite.inputs)


def test_a_model_whose_batch_is_already_free_is_told_so(tmp_path: Path) -> None:
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node], "g", [value("x", ["n", 4])], [value("y", ["n", 4])])
    with pytest.raises(PassFailed, match="nothing to free"):
        free_batch(helper.make_model(graph))


def test_the_pass_writes_the_rewrite_and_reports_its_check(tmp_path: Path) -> None:
    original = cnn_flatten_gemm(tmp_path)
    out = tmp_path / "out.onnx"
    report = DYNAMIC_BATCH.run(original, out, {}, PassContext(work_dir=tmp_path))
    assert report.output == out and out.exists()
    assert report.details["batch_inputs"] == ["x"]
    assert report.details["check"].startswith("batch 3 matches 3 runs at batch 1")
    assert any("Reshape to [1, 144]" in e for e in report.details["edits"])


def test_dynamic_quantization_is_refused_its_scale_would_mix_the_batch(tmp_path: Path) -> None:
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zero"])
    outputs = [
        helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 4]),
        helper.make_tensor_value_info("scale", TensorProto.FLOAT, []),
        helper.make_tensor_value_info("zero", TensorProto.UINT8, []),
    ]
    graph = helper.make_graph([node], "dq", [value("x", [1, 4])], outputs)
    with pytest.raises(PassFailed, match="one quantization scale for the whole batch"):
        free_batch(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_optimize_writes_the_rewrite_as_a_variant_like_any_other(tmp_path: Path) -> None:
    """`optistudio optimize MODEL --recipe dynamic_batch --out DIR --json`: a variant whose batch
    is free, checked against batch-1 runs, judged and timed as every variant is."""
    import json

    from test_cli import optistudio

    original = cnn_flatten_gemm(tmp_path)
    done = optistudio("optimize", str(original), "--recipe", "dynamic_batch", "--seconds", "0.1",
                      "--out", str(tmp_path / "v"), "--json", data_dir=tmp_path / "d")  # fmt: skip

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    variant = report["variants"][0]
    assert variant["status"] == "made", variant
    assert variant["steps"][0]["details"]["check"].startswith("batch 3 matches 3 runs at batch 1")
    freed = onnx.load(report["files"]["dynamic_batch"])
    assert freed.graph.input[0].type.tensor_type.shape.dim[0].dim_param == BATCH_DIM
    assert variant["accuracy"]["mean_cosine"] > 0.9999
