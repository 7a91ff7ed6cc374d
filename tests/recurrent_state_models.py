"""Tiny recurrent models built in code whose GRU state is a graph input, as torch exports them.

Shaped like AECMOS (speechmos): frames x ['N', 3, 4] beside a state h0 declared [2, 1, 5] at the
batch it was traced with; a Slice takes one layer of it as the GRU's initial_h ([directions,
batch, hidden]: the batch is axis 1), and a Squeeze without axes, traced at batch 1, drops the
batch at batch 1 ([1, 1, 2] -> [2]) but not at batch 3 ([3, 1, 2] -> [3, 2]). `mixing=True` adds
the mean over the batch to every row, so the batch cannot be freed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HIDDEN, FEATURES, STEPS, LAYERS = 5, 4, 3, 2


def build_state_model(
    path: Path,
    *,
    opset: int = 9,
    mixing: bool = False,
    slice_axis: int = 0,
    layout: int = 0,
    layers: int = LAYERS,
    batch: str | int = "N",
) -> Path:
    """The model at `path`; `slice_axis` is the axis the Slice of h0 cuts (1: the batch's, so
    the graph no longer says which axis is the batch); `layout` the GRU's (opset 14+); with
    one layer h0 [1, 1, 5] feeds the GRU as it is (no Slice); `batch` is x's dim 0 (1: every
    input declared at batch 1, as most exports are)."""
    rng = np.random.default_rng(7)
    weights = {
        "W": rng.normal(0, 0.5, (1, 3 * HIDDEN, FEATURES)),
        "R": rng.normal(0, 0.5, (1, 3 * HIDDEN, HIDDEN)),
        "B": rng.normal(0, 0.1, (1, 6 * HIDDEN)),
        "head": rng.normal(0, 0.5, (HIDDEN, 2)),
    }
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()]
    nodes = [helper.make_node("Transpose", ["x"], ["x_t"], perm=[1, 0, 2])] if layout == 0 else []
    if layers > 1:
        nodes += _slice(opset, slice_axis, inits)
    else:
        nodes.append(helper.make_node("Identity", ["h0"], ["h_layer"]))
    gru_x = "x_t" if layout == 0 else "x"
    extra = {"layout": layout} if layout else {}
    nodes.append(
        helper.make_node(
            "GRU", [gru_x, "W", "R", "B", "", "h_layer"], ["", "y_h"], hidden_size=HIDDEN, **extra
        )
    )
    if layout == 0:  # y_h [directions, N, hidden] -> [N, directions, hidden]
        nodes.append(helper.make_node("Transpose", ["y_h"], ["rows"], perm=[1, 0, 2]))
    else:
        nodes.append(helper.make_node("Identity", ["y_h"], ["rows"]))
    last = "rows"
    if mixing:
        nodes.append(_mean_over_batch(opset))
        nodes.append(helper.make_node("Add", ["rows", "batch_mean"], ["mixed"]))
        last = "mixed"
    nodes.append(helper.make_node("MatMul", [last, "head"], ["scores"]))
    nodes.append(helper.make_node("Squeeze", ["scores"], ["output"]))
    h0_shape = [layers, 1, HIDDEN] if layout == 0 else [1, layers, HIDDEN]
    graph = helper.make_graph(
        nodes,
        "state_model",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, STEPS, FEATURES]),
            helper.make_tensor_value_info("h0", TensorProto.FLOAT, h0_shape),
        ],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _slice(opset: int, axis: int, inits: list[onnx.TensorProto]) -> list[onnx.NodeProto]:
    """The last layer of h0 (1:2 along `axis`) as the GRU's initial_h."""
    if opset < 10:
        return [helper.make_node("Slice", ["h0"], ["h_layer"], starts=[1], ends=[2], axes=[axis])]
    for name, value in (("starts", 1), ("ends", 2), ("axes", axis)):
        inits.append(numpy_helper.from_array(np.array([value], np.int64), f"slice_{name}"))
    return [
        helper.make_node("Slice", ["h0", "slice_starts", "slice_ends", "slice_axes"], ["h_layer"])
    ]


def _mean_over_batch(opset: int) -> onnx.NodeProto:
    return helper.make_node("ReduceMean", ["rows"], ["batch_mean"], axes=[0], keepdims=1)
