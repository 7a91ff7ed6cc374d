"""Tiny models for the optimization tests: ones ONNX Runtime's optimizer rewrites into its own
operators, and one that a recipe for OpenVINO cannot handle."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HIDDEN = 16


def rms_norm_model(path: Path, *, opset: int = 13) -> Path:
    """x / sqrt(mean(x^2) + eps) * w over the last axis: [batch, 4, 16] -> same. ONNX Runtime's
    'extended' optimization fuses it into SimplifiedLayerNormalization (default domain)."""
    nodes = [
        helper.make_node("Pow", ["x", "two"], ["squared"]),
        _mean("squared", "mean_square", opset),
        helper.make_node("Add", ["mean_square", "eps"], ["shifted"]),
        helper.make_node("Sqrt", ["shifted"], ["rms"]),
        helper.make_node("Div", ["x", "rms"], ["normalised"]),
        helper.make_node("Mul", ["normalised", "gamma"], ["y"]),
    ]
    return _save(nodes, "rms_norm", path, opset)


def layer_norm_model(path: Path, *, opset: int = 13) -> Path:
    """(x - mean) / sqrt(var + eps) * gamma + beta: below opset 17 ONNX Runtime fuses it into
    its own LayerNormalization, which ONNX defines only from opset 17."""
    nodes = [
        _mean("x", "mean", opset),
        helper.make_node("Sub", ["x", "mean"], ["centred"]),
        helper.make_node("Pow", ["centred", "two"], ["squared"]),
        _mean("squared", "variance", opset),
        helper.make_node("Add", ["variance", "eps"], ["shifted"]),
        helper.make_node("Sqrt", ["shifted"], ["deviation"]),
        helper.make_node("Div", ["centred", "deviation"], ["normalised"]),
        helper.make_node("Mul", ["normalised", "gamma"], ["scaled"]),
        helper.make_node("Add", ["scaled", "beta"], ["y"]),
    ]
    return _save(nodes, "layer_norm", path, opset)


def det_model(path: Path) -> Path:
    """det(x @ w): [batch, 4, 4] -> [batch]. ONNX Runtime runs it; OpenVINO's ONNX front end
    has no Det, so a variant for OpenVINO (int8_nncf) fails while the others are made."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Det", ["m"], ["y"])],
        "det",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch"])],
        initializer=[weight],
    )
    model = helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, path)
    return path


def _mean(source: str, target: str, opset: int) -> onnx.NodeProto:
    if opset >= 18:  # axes became an input
        return helper.make_node("ReduceMean", [source, "last_axis"], [target], keepdims=1)
    return helper.make_node("ReduceMean", [source], [target], axes=[-1], keepdims=1)


def _save(nodes: list[onnx.NodeProto], name: str, path: Path, opset: int) -> Path:
    rng = np.random.default_rng(0)
    constants = {
        "two": np.array(2.0, np.float32),
        "eps": np.array(1e-5, np.float32),
        "gamma": rng.uniform(0.5, 1.5, HIDDEN).astype(np.float32),
        "beta": rng.uniform(-0.5, 0.5, HIDDEN).astype(np.float32),
        "last_axis": np.array([-1], np.int64),
    }
    used = {name for node in nodes for name in node.input}
    shape = ["batch", 4, HIDDEN]
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        initializer=[numpy_helper.from_array(v, k) for k, v in constants.items() if k in used],
    )
    model = helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def text_line_model(path: Path, *, dim: int | str = "?") -> Path:
    """A text-line reader as exporters write it: x [dim, 3, 32, dim] (every dynamic dim `dim`:
    '?' or Paddle2ONNX's -1), Conv + Relu, then an AveragePool 32 high and 64 wide. Lines
    narrower than 64 cannot run, so the default size of a dynamic dim (16) fails."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("AveragePool", ["r"], ["y"], kernel_shape=[32, 64], strides=[32, 8]),
        ],
        "text_line",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim, 3, 32, dim])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dim, 4, 1, dim])],
        initializer=[numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, ir_version=7, opset_imports=[helper.make_opsetid("", 11)])
    onnx.save(model, path)
    return path


def near_tie_classifier(path: Path, *, classes: int = 6, features: int = 32) -> Path:
    """softmax(x @ W) over `classes`, W's columns 0 and 1 a hair apart: in FP32 either class
    can win a sample, once quantized to INT8 the two columns are equal and class 0 always
    wins the tie, so about half the samples flip top-1 (a known answer for the drill-down)."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((features, classes)).astype(np.float32)
    weight[:, 1] = weight[:, 0] + rng.standard_normal(features).astype(np.float32) * 1e-4
    weight[:, 2:] -= 10.0  # far behind: the race is between classes 0 and 1
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["logits"]),
            helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
        ],
        "near_tie",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", classes])],
        initializer=[numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, path)
    return path
