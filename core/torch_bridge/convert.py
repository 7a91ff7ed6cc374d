"""ONNX model -> OnnxModule: refuse unsupported ops first, then build one step per node."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from optistudio.core.torch_bridge import layers, tensor_ops
from optistudio.core.torch_bridge.context import BuildContext, constant_value
from optistudio.core.torch_bridge.module import OnnxModule
from optistudio.core.torch_bridge.support import (
    SUPPORTED_OPS,
    UnsupportedOps,
    require_torch,
    unsupported_ops,
)

Builder = Callable[[onnx.NodeProto, BuildContext], tuple[object, list[str]]]

BUILDERS: dict[str, Builder] = {
    "Conv": layers.conv,
    "ConvTranspose": layers.conv_transpose,
    "Gemm": layers.gemm,
    "MatMul": layers.matmul,
    "BatchNormalization": layers.batch_norm,
    "MaxPool": layers.pool("max"),
    "AveragePool": layers.pool("avg"),
    "GlobalAveragePool": lambda node, ctx: (layers.GlobalPool("avg"), [node.input[0]]),
    "GlobalMaxPool": lambda node, ctx: (layers.GlobalPool("max"), [node.input[0]]),
    **{op: tensor_ops.unary for op in tensor_ops.UNARY},
    **{op: tensor_ops.binary for op in tensor_ops.BINARY},
    **{op: tensor_ops.variadic for op in tensor_ops.VARIADIC},
    **{op: tensor_ops.activation for op in ("LeakyRelu", "Elu", "Selu", "Gelu", "HardSigmoid")},
    "Clip": tensor_ops.clip,
    "Softmax": tensor_ops.softmax,
    "LogSoftmax": tensor_ops.softmax,
    "Flatten": tensor_ops.flatten,
    "Reshape": tensor_ops.reshape,
    "Transpose": tensor_ops.transpose,
    "Concat": tensor_ops.concat,
    "Split": tensor_ops.split,
    "Squeeze": tensor_ops.squeeze,
    "Unsqueeze": tensor_ops.unsqueeze,
    **{op: tensor_ops.reduce_op for op in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin")},
    "Pad": tensor_ops.pad,
    "Slice": tensor_ops.slice_op,
    "Gather": tensor_ops.gather,
    "Shape": tensor_ops.shape,
    "Cast": tensor_ops.cast,
    "Dropout": tensor_ops.dropout,
    "Where": tensor_ops.where,
    "Expand": tensor_ops.expand,
    "ConstantOfShape": tensor_ops.constant_of_shape,
}
assert set(BUILDERS) | {"Constant"} == SUPPORTED_OPS, "support.SUPPORTED_OPS and BUILDERS differ"


def convert(model: onnx.ModelProto | Path | str) -> OnnxModule:
    """The ONNX model as an OnnxModule (optistudio.core.torch_bridge.to_torch)."""
    require_torch("The ONNX-to-PyTorch bridge")
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model))
    missing = unsupported_ops(proto)
    if missing:
        raise UnsupportedOps(missing)
    graph = proto.graph
    ctx = BuildContext(opset=_default_opset(proto))
    ctx.constants = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    steps = []
    for node in graph.node:
        if node.op_type == "Constant":
            ctx.constants[node.output[0]] = constant_value(node)
            continue
        module, feeds = BUILDERS[node.op_type](node, ctx)
        steps.append((module, feeds, list(node.output)))
    inputs = [i.name for i in graph.input if i.name not in ctx.constants]
    needed = {name for _, feeds, _ in steps for name in feeds if name}
    needed |= {o.name for o in graph.output}
    runtime = {name: np.asarray(ctx.constants[name]) for name in ctx.constants if name in needed}
    built = OnnxModule(steps, runtime, inputs, [o.name for o in graph.output])  # type: ignore[arg-type]
    return built.eval()


def _default_opset(model: onnx.ModelProto) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    return 13
