"""Nodes of a QDQ graph made to compute in float: no DequantizeLinear output read, no Q/DQ pair
left on a tensor only float nodes read.

ONNX Runtime's QDQ quantizer puts one Q/DQ pair on a quantized tensor and makes *every* reader
take the DequantizeLinear output, the nodes in `nodes_to_exclude` included; at run time ONNX
Runtime (1.20 on) then quantizes an excluded Conv's float weight itself and fuses
DQ -> Conv -> Q into a QLinearConv, so the node "kept in FP32" runs in INT8. Here each such
input is wired back to the float tensor before the pair (the Q's input), or, for a weight
behind a DequantizeLinear, to the weight dequantized once ((q - zero_point) * scale along the
DQ's axis). A pair on an excluded node's output that no quantized node reads is dropped, and
Q/DQ nodes nobody reads any longer are removed, with the initializers only they used.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

_Q, _DQ = "QuantizeLinear", "DequantizeLinear"


def keep_float(proto: onnx.ModelProto, names: set[str]) -> int:
    """Make the nodes called `names` read float inputs (in place); returns the inputs rewired."""
    graph = proto.graph
    producers = {out: node for node in graph.node for out in node.output}
    weights = {init.name: init for init in graph.initializer}
    rewired = 0
    for node in graph.node:
        if node.name not in names:
            continue
        for index, tensor in enumerate(node.input):
            source = _float_source(graph, producers, weights, tensor)
            if source is not None:
                node.input[index] = source
                rewired += 1
    _drop_output_pairs(graph, names)
    _prune(graph)
    return rewired


def reads_dequantized(graph: onnx.GraphProto, name: str) -> bool:
    """Whether the node called `name` reads a DequantizeLinear output."""
    dequantized = {out for node in graph.node if node.op_type == _DQ for out in node.output}
    return any(dequantized.intersection(n.input) for n in graph.node if n.name == name)


def _float_source(
    graph: onnx.GraphProto,
    producers: dict[str, onnx.NodeProto],
    weights: dict[str, onnx.TensorProto],
    tensor: str,
) -> str | None:
    """The float tensor behind `tensor` when a DequantizeLinear makes it, else None."""
    dq = producers.get(tensor)
    if dq is None or dq.op_type != _DQ:
        return None
    q = producers.get(dq.input[0])
    if q is not None and q.op_type == _Q:
        return q.input[0]
    if dq.input[0] in weights and not _has_block_size(dq):
        name = f"{tensor}_float"
        if name not in weights:
            array = _dequantized(dq, weights)
            graph.initializer.append(numpy_helper.from_array(array, name))
            weights[name] = graph.initializer[-1]
        return name
    return None


def _has_block_size(dq: onnx.NodeProto) -> bool:
    return any(attr.name == "block_size" and attr.i for attr in dq.attribute)


def _dequantized(dq: onnx.NodeProto, weights: dict[str, onnx.TensorProto]) -> np.ndarray:
    """(q - zero_point) * scale, per tensor or along the DQ's axis, as float32."""
    values = numpy_helper.to_array(weights[dq.input[0]]).astype(np.float32)
    scale = numpy_helper.to_array(weights[dq.input[1]]).astype(np.float32)
    zero = (
        numpy_helper.to_array(weights[dq.input[2]]).astype(np.float32)
        if len(dq.input) > 2 and dq.input[2]
        else np.zeros_like(scale)
    )
    if scale.ndim == 1 and values.ndim > 0:
        axis = next((a.i for a in dq.attribute if a.name == "axis"), 1) % values.ndim
        shape = [1] * values.ndim
        shape[axis] = scale.size
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return ((values - zero) * scale).astype(np.float32)


def _drop_output_pairs(graph: onnx.GraphProto, names: set[str]) -> None:
    """A Q/DQ pair on a float node's output whose DQ only a graph output takes: the node
    writes the graph output itself."""
    producers = {out: node for node in graph.node for out in node.output}
    readers = _readers(graph)
    outputs = {value.name for value in graph.output}
    for q in [node for node in graph.node if node.op_type == _Q]:
        source = producers.get(q.input[0])
        dqs = [n for n in readers.get(q.output[0], []) if n.op_type == _DQ]
        if source is None or source.name not in names or len(dqs) != 1:
            continue
        (dq,) = dqs
        alone = readers.get(q.input[0], []) == [q] and q.input[0] not in outputs
        if alone and dq.output[0] in outputs and not readers.get(dq.output[0]):
            index = list(source.output).index(q.input[0])
            source.output[index] = dq.output[0]
            graph.node.remove(dq)
            graph.node.remove(q)


def _prune(graph: onnx.GraphProto) -> None:
    """Remove Q/DQ nodes whose outputs nobody reads, then initializers nobody reads."""
    outputs = {value.name for value in graph.output}
    while True:
        readers = _readers(graph)
        dead = [
            node
            for node in graph.node
            if node.op_type in (_Q, _DQ)
            and not any(out in outputs or readers.get(out) for out in node.output)
        ]
        if not dead:
            break
        for node in dead:
            graph.node.remove(node)
    used = _all_inputs(graph) | outputs
    kept = [init for init in graph.initializer if init.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)


def _all_inputs(graph: onnx.GraphProto) -> set[str]:
    """Every tensor a node reads, in subgraphs (If, Loop, Scan bodies) too."""
    found: set[str] = set()
    for node in graph.node:
        found.update(node.input)
        for attr in node.attribute:
            for body in [attr.g] if attr.HasField("g") else list(attr.graphs):
                found |= _all_inputs(body)
    return found


def _readers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    found: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            found.setdefault(name, []).append(node)
    return found
