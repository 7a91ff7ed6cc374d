"""How many parameters a model has: the elements it stores, and those its graph generates.

Most exports store their weights (initializers, Constant values, sparse values). Some generate
them in the graph instead: RandomNormal / RandomUniform draw a tensor of a fixed shape,
ConstantOfShape fills one, Range counts one out, EyeLike makes an identity. Once a runtime or a
pass folds those constants (a quantized variant stores them), they are weights like any other,
so the card counts them too: the elements of every such generator's output whose inputs are
all constant and whose shape is static (its `shape` attribute, else shape inference with data
propagation). Tensors the generators are computed from are counted once, as stored.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import onnx

from optistudio.core.model.declared_sizes import graph_tensors

logger = logging.getLogger(__name__)

GENERATORS = frozenset(
    {
        "ConstantOfShape",
        "RandomNormal",
        "RandomUniform",
        "RandomNormalLike",
        "RandomUniformLike",
        "Range",
        "EyeLike",
    }
)
"""Ops that make a tensor from nothing but constants: weights generated in the graph."""


def parameter_count(model: onnx.ModelProto) -> int:
    """Stored elements (`stored_elements`) plus the elements the graph generates from constants
    (`generated_elements`)."""
    return stored_elements(model.graph) + generated_elements(model)


def stored_elements(graph: onnx.GraphProto) -> int:
    """Elements of every stored tensor (initializers, Constant values, subgraphs) and sparse
    values."""
    dense = sum(_elements(tensor.dims) for tensor in graph_tensors(graph))
    return dense + sum(_elements(sparse.values.dims) for sparse in graph.sparse_initializer)


def generated_elements(model: onnx.ModelProto) -> int:
    """Elements of the outputs of generator ops fed by constants alone, where their shape is
    static; 0 when the graph generates nothing (no shape inference is run then)."""
    graph = model.graph
    makers = [node for node in _constant_nodes(graph) if node.op_type in GENERATORS]
    if not makers:
        return 0
    shapes = _static_shapes(model)
    total = 0
    for node in makers:
        shape = _shape_attribute(node) or shapes.get(node.output[0])
        if shape is not None:
            total += _elements(shape)
    return total


def _constant_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The nodes whose inputs are all constants (stored, or computed from constants), in graph
    order (ONNX keeps each node after its producers)."""
    stored = {tensor.name for tensor in graph.initializer}
    stored |= {sparse.values.name for sparse in graph.sparse_initializer}
    known = stored | {""}  # an omitted optional input is no data
    found = []
    for node in graph.node:
        if all(name in known for name in node.input):
            found.append(node)
            known.update(node.output)
    return found


def _shape_attribute(node: onnx.NodeProto) -> list[int] | None:
    """A RandomNormal / RandomUniform's fixed `shape` attribute."""
    for attribute in node.attribute:
        if attribute.name == "shape" and attribute.type == onnx.AttributeProto.INTS:
            return list(attribute.ints)
    return None


def _static_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    """Every value's shape that shape inference (with data propagation) finds fully static."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception as exc:  # a count must never reject a model
        logger.info("shape inference for the parameter count failed: %s", exc)
        return {}
    shapes = {}
    for value in (*inferred.graph.value_info, *inferred.graph.output):
        dims = value.type.tensor_type.shape.dim
        if value.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            shapes[value.name] = [d.dim_value for d in dims]
    return shapes


def _elements(dims: Iterable[int]) -> int:
    count = 1
    for dim in dims:
        count *= int(dim)
    return count
