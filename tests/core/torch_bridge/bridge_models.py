"""Tiny ONNX models built in code for the bridge and QAT tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _init(rng: np.random.Generator, name: str, *shape: int, scale: float = 0.3) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _ints(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def _model(nodes, inits, inputs, outputs, opset: int = 13) -> onnx.ModelProto:  # type: ignore[no-untyped-def]
    graph = helper.make_graph(nodes, "tiny", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


def tiny_cnn(classes: int = 10, *, seed: int = 0, opset: int = 14) -> onnx.ModelProto:
    """x [batch, 1, 8, 8] -> logits: Conv (asymmetric pads) + BN + Relu, MaxPool, depthwise
    Conv + HardSwish, pointwise Conv + Clip, AveragePool, GlobalAveragePool, Flatten, Gemm."""
    rng = np.random.default_rng(seed)
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 2, 2], strides=[1, 1]),
        helper.make_node(
            "BatchNormalization", ["c1", "g", "beta", "mu", "var"], ["n1"], epsilon=1e-3
        ),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "wd"], ["c2"], pads=[1, 1, 1, 1], group=8),
        helper.make_node("HardSwish", ["c2"], ["h2"]),
        helper.make_node("Conv", ["h2", "wp", "bp"], ["c3"]),
        helper.make_node("Clip", ["c3", "lo", "hi"], ["r3"]),
        helper.make_node("AveragePool", ["r3"], ["a3"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["a3"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"]),
        helper.make_node("Gemm", ["flat", "wf", "bf"], ["logits"], transB=1),
    ]
    inits = [
        _init(rng, "w1", 8, 1, 3, 3),
        _init(rng, "b1", 8),
        numpy_helper.from_array((1 + 0.1 * rng.standard_normal(8)).astype(np.float32), "g"),
        _init(rng, "beta", 8),
        _init(rng, "mu", 8),
        numpy_helper.from_array((1 + rng.random(8)).astype(np.float32), "var"),
        _init(rng, "wd", 8, 1, 3, 3),
        _init(rng, "wp", 16, 8, 1, 1),
        _init(rng, "bp", 16),
        numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
        numpy_helper.from_array(np.array(6.0, np.float32), "hi"),
        _init(rng, "wf", classes, 16),
        _init(rng, "bf", classes),
    ]
    inputs = [helper.make_tensor_value_info("x", f, ["batch", 1, 8, 8])]
    outputs = [helper.make_tensor_value_info("logits", f, ["batch", classes])]
    return _model(nodes, inits, inputs, outputs, opset)


def tiny_mlp(*, seed: int = 1) -> onnx.ModelProto:
    """x [batch, 12] -> (probabilities [batch, 3], features [batch, 2, 4]) through MatMul + Add,
    Sigmoid, HardSigmoid, Sub/Div/Mul, Reshape, Transpose, Unsqueeze/Squeeze, ReduceMean, Pad,
    Concat, Constant, Dropout, Identity and Softmax."""
    rng = np.random.default_rng(seed)
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"]),
        helper.make_node("Add", ["m1", "b1"], ["a1"]),
        helper.make_node("Sigmoid", ["a1"], ["s1"]),
        helper.make_node("HardSigmoid", ["a1"], ["hs"], alpha=0.25, beta=0.4),
        helper.make_node(
            "Constant", [], ["half"], value=numpy_helper.from_array(np.array(0.5, np.float32))
        ),
        helper.make_node("Sub", ["s1", "half"], ["d1"]),
        helper.make_node("Div", ["d1", "two"], ["d2"]),
        helper.make_node("Mul", ["d2", "hs"], ["h"]),
        helper.make_node("Dropout", ["h"], ["h_drop"]),
        helper.make_node("Reshape", ["h_drop", "shape"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1]),
        helper.make_node("Unsqueeze", ["t", "ax1"], ["u"]),
        helper.make_node("Squeeze", ["u", "ax1"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["rm"], axes=[2], keepdims=1),
        helper.make_node("Pad", ["rm", "pads"], ["pd"]),
        helper.make_node("Concat", ["sq", "pd"], ["cat"], axis=2),
        helper.make_node("Identity", ["cat"], ["features"]),
        helper.make_node("Flatten", ["features"], ["flat"]),
        helper.make_node("Gemm", ["flat", "w2"], ["logits"], alpha=0.5),
        helper.make_node("Softmax", ["logits"], ["probabilities"], axis=-1),
    ]
    inits = [
        _init(rng, "w1", 12, 8),
        _init(rng, "b1", 8),
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        _ints("shape", [-1, 4, 2]),
        _ints("ax1", [1]),
        _ints("pads", [0, 0, 0, 0, 0, 2]),
        _init(rng, "w2", 14, 3),
    ]
    inputs = [helper.make_tensor_value_info("x", f, ["batch", 12])]
    outputs = [
        helper.make_tensor_value_info("probabilities", f, ["batch", 3]),
        helper.make_tensor_value_info("features", f, ["batch", 2, 7]),
    ]
    return _model(nodes, inits, inputs, outputs)


def with_ops(*ops: str) -> onnx.ModelProto:
    """x [1, 4] -> y through a chain of the given single-input ops (for refusal tests)."""
    f = TensorProto.FLOAT
    names = ["x", *[f"t{i}" for i in range(len(ops) - 1)], "y"]
    nodes = [
        helper.make_node(op, [a], [b]) for op, a, b in zip(ops, names[:-1], names[1:], strict=True)
    ]
    graph = helper.make_graph(
        nodes,
        "ops",
        [helper.make_tensor_value_info("x", f, [1, 4])],
        [helper.make_tensor_value_info("y", f, None)],
    )
    return helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])
