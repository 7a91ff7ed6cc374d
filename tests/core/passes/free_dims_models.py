"""Tiny graphs declared at fixed sizes, built in code, for the free-dims tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _weight(name: str, shape: list[int], seed: int) -> onnx.TensorProto:
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _convs() -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """Conv stride 2 + Relu, Conv stride 2 + Relu: [N, 3, H, W] -> [N, 8, H/4, W/4]."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], strides=[2, 2], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], strides=[2, 2], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
    ]  # fmt: skip
    weights = [
        _weight("w1", [4, 3, 3, 3], 1), _weight("b1", [4], 2),
        _weight("w2", [8, 4, 3, 3], 3), _weight("b2", [8], 4),
    ]  # fmt: skip
    return nodes, weights


def fully_convolutional(path: Path, batch: int = 10, size: int = 32) -> Path:
    """Declared [10, 3, 32, 32] -> [10, 8, 8, 8] and a 1x1 head [10, 2, 8, 8]."""
    nodes, weights = _convs()
    nodes.append(helper.make_node("Conv", ["r2", "w3"], ["heat"], name="head"))
    weights.append(_weight("w3", [2, 8, 1, 1], 5))
    side = size // 4
    graph = helper.make_graph(
        nodes, "fcn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, size, size])],
        [
            helper.make_tensor_value_info("r2", TensorProto.FLOAT, [batch, 8, side, side]),
            helper.make_tensor_value_info("heat", TensorProto.FLOAT, [batch, 2, side, side]),
        ],
        weights,
    )  # fmt: skip
    return _save(graph, path)


def baked_reshape(path: Path, batch: int = 10, size: int = 32) -> Path:
    """The convolutions, then a Reshape to the constant [10, 8, 64] (the 8x8 map flattened,
    a size derived from the declared dims), transposed to anchors [10, 64, 8]."""
    nodes, weights = _convs()
    side = size // 4
    nodes += [
        helper.make_node("Reshape", ["r2", "target"], ["flat"], name="flatten_map"),
        helper.make_node("Transpose", ["flat"], ["anchors"], perm=[0, 2, 1], name="to_anchors"),
    ]
    weights.append(numpy_helper.from_array(np.array([batch, 8, side * side], np.int64), "target"))
    graph = helper.make_graph(
        nodes, "anchors",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info("anchors", TensorProto.FLOAT, [batch, side * side, 8])],
        weights,
    )  # fmt: skip
    return _save(graph, path)


def flatten_gemm(path: Path) -> Path:
    """A classifier declared [1, 3, 32, 32]: the convolutions, Flatten, Gemm to 10 classes
    (its weight fixes 8 x 8 x 8 = 512 features, so the height and width are needed)."""
    nodes, weights = _convs()
    nodes += [
        helper.make_node("Flatten", ["r2"], ["flat"], axis=1, name="flatten"),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1, name="fc"),
    ]
    weights += [_weight("fc_w", [10, 512], 6), _weight("fc_b", [10], 7)]
    graph = helper.make_graph(
        nodes, "classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
        weights,
    )  # fmt: skip
    return _save(graph, path)
