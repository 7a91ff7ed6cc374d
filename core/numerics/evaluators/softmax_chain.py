"""A softmax written in primitive ops, read as the Softmax it computes.

softmax(x)_i = exp(x_i) / sum_j exp(x_j), over one axis. Exporters that do not emit a Softmax
node (Paddle's for some heads, hand-written layers, old opsets) write it out:

    e = Exp(x)                     or Exp(Sub(x, ReduceMax(x))): the max subtracted first keeps
                                   exp from overflowing and changes nothing, since
                                   exp(x_i - m) / sum_j exp(x_j - m) = softmax(x)_i
    s = ReduceSum(e, axes=[a])
    y = Div(e, s)                  or Mul(e, Reciprocal(s))

`softmax_chain` says whether a node ends such a chain: the numerator and the ReduceSum's input
are the same Exp (past pass-through ops, as every producer is read). A sum or max reduced
without keeping its axis and broadcast back (Reshape, then Expand: jax2tf writes softmax so, as
magika's classifier has it) is the same sum, and so is a max floored by a constant first
(Max(c, ReduceMax(x)): it only keeps exp finite). The axis is the ReduceSum's
one axis (an attribute before opset 13, a constant input from it); None when it sums over
several axes, all of them, or axes only known at run time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

import onnx

Producer = Callable[[str], "onnx.NodeProto | None"]
"""A tensor's producer, past pass-through ops (None for a graph input or a weight)."""


class Chain(NamedTuple):
    """A softmax found in primitive ops: its axis, its input's producer, the ops in words."""

    axis: int | None
    source: onnx.NodeProto | None
    written_as: str


def softmax_chain(
    node: onnx.NodeProto, producer: Producer, constants: Mapping[str, list[int]]
) -> Chain | None:
    """The softmax `node` ends (module docstring), or None when it ends none."""
    parts = _quotient(node, producer)
    if parts is None:
        return None
    exp, total = parts[0], _past_broadcast(parts[1], producer)
    if exp.op_type != "Exp" or total is None or total.op_type != "ReduceSum" or not total.input:
        return None
    if not _same(producer(total.input[0]), exp):
        return None
    source, stabilised = _exp_source(exp, producer)
    ops = ["ReduceMax", "Sub"] if stabilised else []
    ops += ["Exp", "ReduceSum", "Div" if node.op_type == "Div" else "Reciprocal / Mul"]
    return Chain(_one_axis(total, constants), source, " / ".join(ops))


def _past_broadcast(node: onnx.NodeProto | None, producer: Producer) -> onnx.NodeProto | None:
    """The node past Expand ops (a value broadcast back to the shape it was reduced from)."""
    seen = 0
    while node is not None and node.op_type == "Expand" and node.input and seen < 8:
        node = producer(node.input[0])
        seen += 1
    return node


def _is_max(node: onnx.NodeProto | None, producer: Producer) -> bool:
    """A ReduceMax, or a Max of one (floored by a constant: the other input is no node's)."""
    if node is None or node.op_type == "ReduceMax":
        return node is not None
    if node.op_type != "Max" or len(node.input) != 2:
        return False
    fed = [_past_broadcast(producer(name), producer) for name in node.input]
    return sum(f is not None and f.op_type == "ReduceMax" for f in fed) == 1 and None in fed


def _same(node: onnx.NodeProto | None, other: onnx.NodeProto) -> bool:
    return node is not None and list(node.output) == list(other.output)


def _quotient(
    node: onnx.NodeProto, producer: Producer
) -> tuple[onnx.NodeProto, onnx.NodeProto] | None:
    """(numerator, denominator) producers of a Div, or of a Mul by a Reciprocal."""
    if len(node.input) != 2:
        return None
    first, second = (producer(name) for name in node.input)
    if first is None or second is None:
        return None
    if node.op_type == "Div":
        return first, second
    if node.op_type != "Mul":
        return None
    for numerator, other in ((first, second), (second, first)):
        if other.op_type == "Reciprocal" and other.input:
            denominator = producer(other.input[0])
            if denominator is not None:
                return numerator, denominator
    return None


def _exp_source(exp: onnx.NodeProto, producer: Producer) -> tuple[onnx.NodeProto | None, bool]:
    """What the Exp exponentiates (past a max-subtracting Sub) and whether it was stabilised."""
    fed = producer(exp.input[0]) if exp.input else None
    if fed is None or fed.op_type != "Sub" or len(fed.input) != 2:
        return fed, False
    subtracted = _past_broadcast(producer(fed.input[1]), producer)
    if not _is_max(subtracted, producer):
        return fed, False
    return producer(fed.input[0]), True


def _one_axis(node: onnx.NodeProto, constants: Mapping[str, list[int]]) -> int | None:
    for attribute in node.attribute:
        if attribute.name == "axes":
            axes = list(attribute.ints)
            return axes[0] if len(axes) == 1 else None
    if len(node.input) > 1:
        axes = constants.get(node.input[1], [])
        return axes[0] if len(axes) == 1 else None
    return None


def int_constants(graph: onnx.GraphProto, most: int = 8) -> dict[str, list[int]]:
    """Small integer constants by name (initializers and Constant nodes): reductions' axes."""
    tensors = [(init.name, init) for init in graph.initializer]
    found: dict[str, list[int]] = {}
    for node in graph.node:
        for attribute in node.attribute if node.op_type == "Constant" and node.output else []:
            if attribute.name == "value":
                tensors.append((node.output[0], attribute.t))
            elif attribute.name == "value_ints":
                found[node.output[0]] = list(attribute.ints)
    for name, tensor in tensors:
        values = _small_ints(tensor, most)
        if values is not None:
            found[name] = values
    return found


def _small_ints(tensor: onnx.TensorProto, most: int) -> list[int] | None:
    integer = tensor.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32)
    count = 1
    for dim in tensor.dims:
        count *= dim
    if not integer or count > most or tensor.data_location == onnx.TensorProto.EXTERNAL:
        return None
    return [int(value) for value in onnx.numpy_helper.to_array(tensor).reshape(-1)]
