"""What a model says it will hold in memory, read from its protobuf's dims alone.

A file of a few kilobytes can declare a 10^12-element weight (stored "externally"), a fixed-shape
input of a terabyte, or a ConstantOfShape whose shape is a constant of the same size: loading or
running it would exhaust the machine. These checks multiply dims (Python integers, so nothing
overflows) and never materialise a tensor, so they run before the checker or any runtime.

Each tensor is held against the budget on its own, and the graph's inputs together too: four
fixed [2^31] float32 inputs are 8 GiB each but 32 GiB in one run. The node count is capped first
(node_count), since every later step walks every node.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Sequence

import onnx
import psutil

from optistudio.core.errors import ModelRejected
from optistudio.core.model.node_count import check_node_count
from optistudio.core.model.text_fields import check_text_fields

MAX_TENSOR_MB_ENV = "OPTISTUDIO_MAX_TENSOR_MB"

_HINT = (
    "Declared sizes over the budget would exhaust memory when the model is loaded or run. "
    f"If they are real, raise {MAX_TENSOR_MB_ENV} on machines that have the memory."
)
_FOUR_BIT = {
    getattr(onnx.TensorProto, name)
    for name in ("INT4", "UINT4", "FLOAT4E2M1")
    if hasattr(onnx.TensorProto, name)
}
_SHAPE_OPERAND_LIMIT = 64
"""A ConstantOfShape shape constant longer than this is not a shape; it is left to the checker."""


def default_tensor_budget() -> int:
    """MAX_TENSOR_MB_ENV (MiB) when set to a positive number, else half this machine's memory."""
    text = os.environ.get(MAX_TENSOR_MB_ENV, "").strip()
    if text.isdigit() and int(text) > 0:
        return int(text) * 1024**2
    return int(psutil.virtual_memory().total // 2)


def check_declared_sizes(
    model: onnx.ModelProto, limit: int, *, max_nodes: int | None = None
) -> None:
    """ModelRejected when the model holds more than `max_nodes` nodes (default: node_count's
    cap), or any stored tensor, fixed-shape value, constant shape, or the graph's inputs
    together exceed `limit`. Text the card reads that is not UTF-8 is refused here too
    (text_fields), the other check intake runs on the parsed protobuf before the checker."""
    check_node_count(model, max_nodes)
    check_text_fields(model)
    for tensor in model_tensors(model):
        _check(f"tensor {tensor.name!r}", tensor.dims, tensor.data_type, limit)
    for sparse in _sparse_tensors(model.graph):
        _check(f"sparse tensor {sparse.values.name!r}", sparse.dims, sparse.values.data_type, limit)
    for value in _values(model.graph):
        _check_value(value, limit)
    _check_constant_of_shape(model.graph, limit)
    _check_inputs_together(model.graph, limit)


def model_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every dense tensor stored in the model, its subgraphs and its local functions."""
    yield from graph_tensors(model.graph)
    for function in model.functions:
        for node in function.node:
            for attr in node.attribute:
                yield from _attribute_tensors(attr)


def graph_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            yield from _attribute_tensors(attr)


def _attribute_tensors(attr: onnx.AttributeProto) -> Iterator[onnx.TensorProto]:
    kinds = onnx.AttributeProto
    if attr.type == kinds.TENSOR:
        yield attr.t
    elif attr.type == kinds.TENSORS:
        yield from attr.tensors
    elif attr.type == kinds.GRAPH:
        yield from graph_tensors(attr.g)
    elif attr.type == kinds.GRAPHS:
        for graph in attr.graphs:
            yield from graph_tensors(graph)


def _subgraphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _subgraphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from _subgraphs(sub)


def _sparse_tensors(graph: onnx.GraphProto) -> Iterator[onnx.SparseTensorProto]:
    for sub in _subgraphs(graph):
        yield from sub.sparse_initializer


def _values(graph: onnx.GraphProto) -> Iterator[onnx.ValueInfoProto]:
    for sub in _subgraphs(graph):
        yield from sub.input
        yield from sub.output
        yield from sub.value_info


def _check_value(value: onnx.ValueInfoProto, limit: int) -> None:
    """Fixed dims of a tensor-typed input/output/value info; a dynamic dim counts as 1.

    A negative dim_value is dynamic too: Paddle2ONNX writes -1 for "any", and ONNX Runtime
    runs such a model. The message shows the declared shape, dynamic dims as names or '?'.
    """
    if value.type.WhichOneof("value") != "tensor_type":
        return
    tensor = value.type.tensor_type
    size = _value_bytes(tensor)
    if size > limit:
        shown = [_dim_label(dim) for dim in tensor.shape.dim]
        raise _over_budget(f"value {value.name!r}", shown, size, limit)


def _check_inputs_together(graph: onnx.GraphProto, limit: int) -> None:
    """The graph's real inputs (not initializers listed as inputs), fed in one run together;
    a dynamic dim counts as 1."""
    weights = {tensor.name for tensor in graph.initializer}
    sizes = {
        value.name: (_value_bytes(value.type.tensor_type), value.type.tensor_type.shape.dim)
        for value in graph.input
        if value.name not in weights and value.type.WhichOneof("value") == "tensor_type"
    }
    total = sum(size for size, _ in sizes.values())
    if total <= limit:
        return
    named = ", ".join(
        f"{name!r} {_shape([_dim_label(dim) for dim in dims])}"
        for name, (_, dims) in list(sizes.items())[:4]
    )
    more = f" and {len(sizes) - 4} more" if len(sizes) > 4 else ""
    raise ModelRejected(
        f"The model's inputs together ({named}{more}) declare {_gib(total)}, over the "
        f"{_gib(limit)} budget for what one run holds.",
        hint=_HINT,
    )


def _value_bytes(tensor: onnx.TypeProto.Tensor) -> int:
    dims = [1 if (size := _fixed_size(dim)) is None else size for dim in tensor.shape.dim]
    return math.prod(dims) * _itemsize(tensor.elem_type)


def _fixed_size(dim: onnx.TensorShapeProto.Dimension) -> int | None:
    """The size of a fixed dim (0 included); None for a named, unnamed or negative one."""
    return dim.dim_value if dim.HasField("dim_value") and dim.dim_value >= 0 else None


def _dim_label(dim: onnx.TensorShapeProto.Dimension) -> int | str:
    size = _fixed_size(dim)
    return size if size is not None else (dim.dim_param or "?")


def _check_constant_of_shape(graph: onnx.GraphProto, limit: int) -> None:
    """ConstantOfShape nodes whose shape operand is a small constant stored in the graph."""
    for sub in _subgraphs(graph):
        constants = small_int_constants(sub)
        for node in sub.node:
            if node.op_type == "ConstantOfShape" and node.input and node.input[0] in constants:
                dtype = next((a.t.data_type for a in node.attribute if a.name == "value"), 1)
                _check(
                    f"the output of ConstantOfShape {node.name!r}",
                    constants[node.input[0]],
                    dtype,
                    limit,
                )


def small_int_constants(graph: onnx.GraphProto) -> dict[str, list[int]]:
    """INT64 vectors of at most 64 values stored in the graph (initializers, Constant nodes)."""
    named = [(tensor.name, tensor) for tensor in graph.initializer]
    named += [
        (node.output[0], attr.t)
        for node in graph.node
        if node.op_type == "Constant" and node.output
        for attr in node.attribute
        if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR
    ]
    return {name: values for name, tensor in named if (values := _int_values(tensor)) is not None}


def _int_values(tensor: onnx.TensorProto) -> list[int] | None:
    if tensor.data_type != onnx.TensorProto.INT64 or len(tensor.dims) > 1:
        return None
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        return None
    if tensor.int64_data:
        values = list(tensor.int64_data[: _SHAPE_OPERAND_LIMIT + 1])
    elif 0 < len(tensor.raw_data) <= 8 * _SHAPE_OPERAND_LIMIT and len(tensor.raw_data) % 8 == 0:
        raw = tensor.raw_data
        values = [
            int.from_bytes(raw[i : i + 8], "little", signed=True) for i in range(0, len(raw), 8)
        ]
    else:
        return None
    return values if len(values) <= _SHAPE_OPERAND_LIMIT else None


def _check(what: str, dims: Iterable[int], elem_type: int, limit: int) -> None:
    dims = list(dims)
    if any(dim < 0 for dim in dims):
        raise ModelRejected(
            f"The model declares {what} with a negative dimension {dims}.",
            hint="Re-export the model; a stored shape cannot be negative.",
        )
    size = math.prod(dims) * _itemsize(elem_type)
    if size > limit:
        raise _over_budget(what, dims, size, limit)


def _over_budget(what: str, shown: Sequence[int | str], size: int, limit: int) -> ModelRejected:
    return ModelRejected(
        f"The model declares {what} of shape {_shape(shown)}, {_gib(size)}, over the "
        f"{_gib(limit)} budget for one tensor.",
        hint=_HINT,
    )


def declared_bytes(tensor: onnx.TensorProto) -> int:
    """Bytes the tensor's dims and type call for (4-bit types pack two elements a byte)."""
    elements = math.prod(tensor.dims)
    if tensor.data_type in _FOUR_BIT:
        return (elements + 1) // 2
    return elements * _itemsize(tensor.data_type)


def _itemsize(elem_type: int) -> int:
    """Bytes per element (at least 1; strings count 1 byte each, a lower bound)."""
    try:
        return max(1, onnx.helper.tensor_dtype_to_np_dtype(elem_type).itemsize)
    except (KeyError, TypeError, ValueError):
        return 1


def _shape(dims: Sequence[int | str]) -> str:
    text = "x".join(map(str, dims[:8])) + ("x..." if len(dims) > 8 else "")
    return f"[{text[:80]}]"


def _gib(size: int) -> str:
    return f"{size / 1024**3:,.1f} GiB" if size < 1024**5 else f"{float(size):.2e} bytes"
