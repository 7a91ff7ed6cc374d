"""Estimate the floating-point operations of one forward pass from inferred shapes.

FLOPs = 2 x multiply-accumulates (MACs), summed over the heavy ops of the top-level graph:

- Conv / ConvInteger / QLinearConv: weight W is [M, C/group, k1, k2, ...] and output Y is
  [N, M, o1, o2, ...]. Each output element takes C/group x k1 x k2 x ... MACs, so
  MACs = |Y| x prod(W.shape[1:]); groups are accounted for because W already holds C/group.
- ConvTranspose: weight W is [C, M/group, k1, ...] and every input element X scatters into
  M/group x k1 x ... outputs, so MACs = |X| x prod(W.shape[1:]).
- MatMul / MatMulInteger / QLinearMatMul: A is [..., M, K] (or [K]), Y is the broadcast
  [..., M, N]; MACs = |Y| x K.
- Gemm: A is [M, K] ([K, M] when transA), Y is [M, N]; MACs = |Y| x K.

Biases, activations and other elementwise ops are not counted: they are small next to the ops
above and counting them would make the number depend on fusion. Heavy ops inside subgraphs
(If, Loop, Scan) and model-local functions are not counted either.

Symbolic input dims are set to `default_dim` in a copy of the model before shape inference
(with data propagation, so Reshape targets computed from Shape resolve). When a counted op's
shapes cannot be inferred the estimate is None rather than a silent undercount.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import onnx

logger = logging.getLogger(__name__)

Shapes = dict[str, tuple[int, ...]]
MacCounter = Callable[[onnx.NodeProto, Shapes], int | None]

# op type -> index of the weight input, for ops whose MACs are |Y| x prod(W.shape[1:]).
_CONV_WEIGHT_INDEX = {"Conv": 1, "ConvInteger": 1, "QLinearConv": 3}
# op type -> index of the B input (A is always input 0).
_MATMUL_B_INDEX = {"MatMul": 1, "MatMulInteger": 1, "QLinearMatMul": 3}


def estimate_flops(
    model: onnx.ModelProto,
    *,
    default_dim: int = 1,
    input_shapes: dict[str, tuple[int, ...]] | None = None,
) -> int | None:
    """FLOPs (2 x MACs) of Conv, ConvTranspose, MatMul and Gemm for one pass, or None.

    `input_shapes` gives concrete shapes (e.g. the benchmarked ones) for some inputs; the
    other inputs' dynamic dims take `default_dim`, which for images means 1x1 pixels.
    `model` is not modified. Weights need not be loaded: shapes come from the initializers'
    dims, so a model read with `load_external_data=False` works and stays small.
    """
    inferred = _infer_shapes(_with_fixed_inputs(model, default_dim, input_shapes or {}))
    if inferred is None:
        return None
    shapes = _known_shapes(inferred.graph)
    total = 0
    for node in inferred.graph.node:
        counter = _counter_for(node)
        if counter is None:
            continue
        macs = counter(node, shapes)
        if macs is None:
            logger.debug("shapes unknown for %s node %r", node.op_type, node.name)
            return None
        total += macs
    return 2 * total


def _with_fixed_inputs(
    model: onnx.ModelProto, default_dim: int, input_shapes: dict[str, tuple[int, ...]]
) -> onnx.ModelProto:
    """A copy whose graph inputs have given shapes, and `default_dim` for other non-fixed dims."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    for value in fixed.graph.input:
        if not value.type.HasField("tensor_type"):
            continue
        shape = value.type.tensor_type.shape
        if value.name in input_shapes:
            shape.ClearField("dim")
            shape.dim.extend(
                onnx.TensorShapeProto.Dimension(dim_value=size) for size in input_shapes[value.name]
            )
            continue
        for dim in shape.dim:
            if not dim.HasField("dim_value") or dim.dim_value <= 0:
                dim.dim_value = default_dim
    return fixed


def _infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto | None:
    try:
        return onnx.shape_inference.infer_shapes(model, data_prop=True)
    except (onnx.shape_inference.InferenceError, ValueError, RuntimeError) as exc:
        logger.debug("shape inference failed: %s", exc)
        return None


def _known_shapes(graph: onnx.GraphProto) -> Shapes:
    """Fully known tensor shapes by name, from value infos, inputs, outputs and initializers."""
    shapes: Shapes = {init.name: tuple(init.dims) for init in graph.initializer}
    for value in [*graph.input, *graph.value_info, *graph.output]:
        shape = _static_shape(value.type)
        if shape is not None:
            shapes[value.name] = shape
    return shapes


def _static_shape(type_proto: onnx.TypeProto) -> tuple[int, ...] | None:
    if not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return None
    dims = type_proto.tensor_type.shape.dim
    if not all(dim.HasField("dim_value") for dim in dims):
        return None
    return tuple(dim.dim_value for dim in dims)


def _counter_for(node: onnx.NodeProto) -> MacCounter | None:
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type in _CONV_WEIGHT_INDEX:
        return _conv_macs
    if node.op_type in _MATMUL_B_INDEX:
        return _matmul_macs
    return {"ConvTranspose": _conv_transpose_macs, "Gemm": _gemm_macs}.get(node.op_type)


def _conv_macs(node: onnx.NodeProto, shapes: Shapes) -> int | None:
    weight = shapes.get(node.input[_CONV_WEIGHT_INDEX[node.op_type]])
    output = shapes.get(node.output[0])
    if weight is None or output is None:
        return None
    return math.prod(output) * math.prod(weight[1:])


def _conv_transpose_macs(node: onnx.NodeProto, shapes: Shapes) -> int | None:
    data, weight = shapes.get(node.input[0]), shapes.get(node.input[1])
    if data is None or weight is None:
        return None
    return math.prod(data) * math.prod(weight[1:])


def _matmul_macs(node: onnx.NodeProto, shapes: Shapes) -> int | None:
    a, output = shapes.get(node.input[0]), shapes.get(node.output[0])
    if a is None or output is None or not a:
        return None
    return math.prod(output) * a[-1]


def _gemm_macs(node: onnx.NodeProto, shapes: Shapes) -> int | None:
    a, output = shapes.get(node.input[0]), shapes.get(node.output[0])
    if a is None or output is None or len(a) != 2:
        return None
    trans_a = any(attr.name == "transA" and attr.i for attr in node.attribute)
    return math.prod(output) * (a[0] if trans_a else a[1])
