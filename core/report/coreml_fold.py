"""Fold what Core ML's route need not compute: a ConstantOfShape whose shape the graph fixes
(an initializer or a Constant node) becomes the tensor it makes, before the graph is bridged to
PyTorch and traced. The tensor is `np.full(shape, value)` with the node's value (default a
float32 zero), exactly what the op computes, so nothing changes but the graph's size.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper


def folded_constant_shapes(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """A copy of `model` with every ConstantOfShape of a fixed shape turned into an initializer
    of its output, and how many were folded (0: the model itself, unchanged)."""
    graph = model.graph
    fixed = _fixed_tensors(graph)
    folds = {
        index: _filled(node, fixed[node.input[0]])
        for index, node in enumerate(graph.node)
        if node.op_type == "ConstantOfShape"
        and node.domain in ("", "ai.onnx")
        and node.input
        and node.input[0] in fixed
    }
    if not folds:
        return model, 0
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    kept = [node for index, node in enumerate(copy.graph.node) if index not in folds]
    del copy.graph.node[:]
    copy.graph.node.extend(kept)
    copy.graph.initializer.extend(folds.values())
    return copy, len(folds)


def _fixed_tensors(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Tensors the graph fixes: initializers (not overridable inputs) and Constant outputs."""
    inputs = {value.name for value in graph.input}
    found = {t.name: numpy_helper.to_array(t) for t in graph.initializer if t.name not in inputs}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            value = next((a for a in node.attribute if a.name in ("value", "value_ints")), None)
            if value is not None:
                found[node.output[0]] = _attribute_array(value)
    return found


def _attribute_array(attribute: onnx.AttributeProto) -> np.ndarray:
    value = helper.get_attribute_value(attribute)
    return numpy_helper.to_array(value) if attribute.name == "value" else np.array(value, np.int64)


def _filled(node: onnx.NodeProto, shape: np.ndarray) -> onnx.TensorProto:
    """The ConstantOfShape's output as an initializer named like it."""
    value = next((a for a in node.attribute if a.name == "value"), None)
    fill = numpy_helper.to_array(value.t) if value is not None else np.zeros(1, np.float32)
    made = np.full([int(d) for d in shape.reshape(-1)], fill.reshape(()), dtype=fill.dtype)
    return numpy_helper.from_array(made, node.output[0])
