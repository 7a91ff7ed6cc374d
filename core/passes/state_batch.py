"""Free the batch of a recurrent state input: an RNN's initial state carries the batch on axis 1.

ONNX's GRU, LSTM and RNN take `initial_h` (and LSTM `initial_c`) as [num_directions, batch,
hidden] (layout 0, the default) or [batch, num_directions, hidden] (layout 1). A torch export
feeds them from a graph input, often through a Slice per layer (AECMOS: h0 [4, 1, 64] sliced
0:2 and 2:4 into two bidirectional GRUs), and declares that input at the batch it was traced
with: [4, 1, 64] beside an open batch on the audio. Read by its dims alone, such a state has a
"fixed first dimension of 4"; read through the graph, its batch is axis 1, declared at 1.

`state_batch_axes` follows each recurrent node's state inputs back to the graph input they come
from (through Identity, Cast, and Slice or Split along another axis) and says which axis of it
is the batch. `free_state_batch` makes a copy where each such axis declared at 1 carries the
model's batch name, and gives a Squeeze without axes whose input carries the batch the axes it
removes at any batch (torch's `.squeeze()` traced at batch 1 drops the batch too: [1, 1, 2] ->
[2], but [3, 1, 2] -> [3, 2]). The copy is verified, never trusted (`check_state_batch`): at
batch 1 it returns the original's values, and at batch N, row for row, its own runs at batch 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from optistudio.core.errors import PassFailed
from optistudio.core.model.ir_inputs import list_initializers
from optistudio.core.passes.batch_check import (
    ATOL,
    RTOL,
    BatchCheck,
    check_free_batch,
    run_outputs,
)
from optistudio.core.passes.dynamic_batch import fixed_batch_inputs, free_batch

_STATE = {"freeing": "The state's batch", "hint": "Serve the model at batch 1 (several instances)."}

STATE_SLOTS = {"GRU": (5,), "RNN": (5,), "LSTM": (5, 6)}
"""The inputs of each recurrent op that hold an initial state (initial_h, initial_c)."""
_SLOT_NAMES = {5: "initial_h", 6: "initial_c"}
_PASSING_OPS = frozenset({"Identity", "Cast", "Slice", "Split"})
"""Ops a state flows through with its batch on the same axis (Slice and Split along another)."""
STATE_RANK = 3
"""A recurrent state's rank: [directions, batch, hidden] or [batch, directions, hidden]."""
FIRST_OPSET_AXES_AS_INPUT = 13
"""From opset 13 Squeeze takes its axes as an input, before as an attribute."""


@dataclass(frozen=True)
class StateInput:
    """A graph input that feeds a recurrent node's initial state, and its batch axis there."""

    name: str
    axis: int
    node: str
    slot: str

    def sentence(self) -> str:
        layout = "[batch, directions, hidden]" if self.axis == 0 else "[directions, batch, hidden]"
        return (
            f"input {self.name!r} is the {self.slot} of {self.node}, whose batch is axis "
            f"{self.axis} ({layout})"
        )


@dataclass
class StateRewrite:
    """The copy with the states' batch freed, the inputs it batches (name -> axis), and what
    was changed, one line per edit."""

    model: onnx.ModelProto
    states: list[StateInput]
    edits: list[str] = field(default_factory=list)


def state_batch_axes(graph: onnx.GraphProto) -> dict[str, StateInput]:
    """Graph inputs that reach a recurrent node's initial state, by name, with the batch axis
    the node reads them on. An input two nodes read on different axes is left out."""
    producers = {out: node for node in graph.node for out in node.output if out}
    found: dict[str, StateInput] = {}
    clashing: set[str] = set()
    for node in graph.node:
        for slot in STATE_SLOTS.get(node.op_type, ()):
            if slot >= len(node.input) or not node.input[slot]:
                continue
            axis = 0 if _int_attribute(node, "layout", 0) == 1 else 1
            source = _source_input(node.input[slot], axis, producers, graph)
            if source is None:
                continue
            where = f"{node.op_type} {node.name or next(o for o in node.output if o)!r}"
            state = StateInput(source, axis, where, _SLOT_NAMES[slot])
            if source in found and found[source].axis != axis:
                clashing.add(source)
            found.setdefault(source, state)
    return {name: state for name, state in found.items() if name not in clashing}


def fixed_state_inputs(graph: onnx.GraphProto) -> list[StateInput]:
    """The state inputs whose batch axis is not dim 0 and is declared as the number 1 (dim 0 at
    1 is `dynamic_batch.free_batch`'s)."""
    declared = {value.name: _dims(value) for value in graph.input}
    return [
        state
        for state in state_batch_axes(graph).values()
        if state.axis > 0
        and len(declared[state.name]) > state.axis
        and declared[state.name][state.axis] == 1
    ]


def free_state_batch(model: onnx.ModelProto, batch_name: str) -> StateRewrite:
    """A copy of `model` whose fixed-at-1 state inputs carry `batch_name` on their batch axis;
    PassFailed when it has none."""
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    graph = rewritten.graph
    states = fixed_state_inputs(graph)
    if not states:
        raise PassFailed(
            "No recurrent state input of this model has its batch fixed at 1: nothing to free.",
            hint="Batch it as it is.",
        )
    result = StateRewrite(model=rewritten, states=states)
    for state in states:
        value = next(v for v in graph.input if v.name == state.name)
        dim = value.type.tensor_type.shape.dim[state.axis]
        dim.Clear()
        dim.dim_param = batch_name
        result.edits.append(f"{state.sentence()}: axis {state.axis} from 1 to {batch_name!r}")
    del graph.value_info[:]
    inferred = onnx.shape_inference.infer_shapes(rewritten, strict_mode=False)
    _keep_batch_in_squeezes(inferred, batch_name, result.edits)
    del inferred.graph.value_info[:]
    result.model = onnx.shape_inference.infer_shapes(inferred, strict_mode=False)
    if listed := list_initializers(result.model):  # an IR < 4 file lists its constants
        result.edits.append(f"IR {result.model.ir_version}: {', '.join(listed)} listed as inputs")
    return result


def free_batch_beside_states(
    model: onnx.ModelProto, states: list[StateInput]
) -> tuple[onnx.ModelProto, list[str]]:
    """`dynamic_batch.free_batch` on the inputs that are no state (a state's dim 0 of 1 is its
    directions x layers, not the batch): the model with their batch free, and the edits; the
    model itself when none is fixed at 1."""
    names = {state.name for state in states}
    if not [name for name in fixed_batch_inputs(model.graph) if name not in names]:
        return model, []
    hidden = onnx.ModelProto()
    hidden.CopyFrom(model)
    declared = {}
    for value in hidden.graph.input:
        if value.name in names:
            declared[value.name] = onnx.TypeProto()
            declared[value.name].CopyFrom(value.type)
            for index, dim in enumerate(value.type.tensor_type.shape.dim):
                if dim.HasField("dim_value"):
                    dim.dim_param = f"{value.name}_dim{index}"  # not 1: free_batch leaves it
    freed = free_batch(hidden)
    for value in freed.model.graph.input:
        if value.name in declared:
            value.type.CopyFrom(declared[value.name])
    return freed.model, freed.edits


def model_batch_name(graph: onnx.GraphProto, default: str) -> str:
    """The name of the batch the other inputs carry on dim 0, else `default`."""
    for value in graph.input:
        dims = value.type.tensor_type.shape.dim
        if dims and dims[0].HasField("dim_param") and dims[0].dim_param:
            return str(dims[0].dim_param)
    return default


def check_state_batch(
    original: Path, rewritten: Path, samples: list[dict[str, np.ndarray]], axes: dict[str, int]
) -> BatchCheck:
    """The rewrite at batch 1 gives the original's values on every sample (a dim of 1 it keeps
    and the original squeezed aside), and at batch N its own runs at batch 1, row for row;
    `axes` are the inputs stacked and their batch axes. PassFailed says what differs."""
    for sample in samples:
        before = run_outputs(original, sample, "the original", **_STATE)
        after = run_outputs(rewritten, sample, "the rewrite at batch 1", **_STATE)
        for name, value in before.items():
            _same_values(name, value, after[name])
    return check_free_batch(rewritten, rewritten, samples, list(axes), input_axes=axes)


def _source_input(
    name: str, axis: int, producers: dict[str, onnx.NodeProto], graph: onnx.GraphProto
) -> str | None:
    """The graph input `name` flows from with the batch kept on `axis`, or None."""
    inputs = {value.name for value in graph.input} - {init.name for init in graph.initializer}
    seen = set()
    while name not in inputs:
        node = producers.get(name)
        if node is None or name in seen or node.op_type not in _PASSING_OPS:
            return None
        if node.op_type in ("Slice", "Split") and axis in _cut_axes(node, graph, producers):
            return None
        seen.add(name)
        name = node.input[0]
    return name


def _cut_axes(
    node: onnx.NodeProto, graph: onnx.GraphProto, producers: dict[str, onnx.NodeProto]
) -> set[int]:
    """The axes of a state (rank 3) a Slice or Split cuts; all three when they are not
    constant."""
    every = {0, 1, 2}
    if node.op_type == "Split":
        return {_int_attribute(node, "axis", 0) % STATE_RANK}
    axes = _ints_attribute(node, "axes")
    if axes is None and len(node.input) > 3 and node.input[3]:
        constant = _constant(node.input[3], graph, producers)
        axes = [int(a) for a in constant.ravel()] if constant is not None else None
        if axes is None:
            return every
    if axes is None:  # no axes: the first len(starts) axes
        starts = _ints_attribute(node, "starts")
        if starts is None and len(node.input) > 1:
            constant = _constant(node.input[1], graph, producers)
            starts = list(constant.ravel()) if constant is not None else None
        axes = list(range(len(starts))) if starts is not None else list(every)
    return {axis % STATE_RANK for axis in axes}


def _keep_batch_in_squeezes(model: onnx.ModelProto, batch_name: str, edits: list[str]) -> None:
    """Give each Squeeze without axes whose input carries the batch the axes of its other
    dims of 1; left as it is when a dim's size is unknown (the check then decides)."""
    shapes = {value.name: _dims(value) for value in (*model.graph.value_info, *model.graph.input)}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    for node in model.graph.node:
        if node.op_type != "Squeeze" or _has_axes(node):
            continue
        dims = shapes.get(node.input[0])
        if dims is None or batch_name not in dims:
            continue
        if any(d is None or (isinstance(d, str) and d != batch_name) for d in dims):
            continue
        axes = [i for i, d in enumerate(dims) if d == 1]
        _set_axes(model.graph, node, axes, opset)
        edits.append(
            f"node {node.name or node.output[0]!r} (Squeeze): axes {axes}, so that it keeps "
            f"the batch at batch 1 (it squeezed every dim of 1)"
        )


def _has_axes(node: onnx.NodeProto) -> bool:
    return _ints_attribute(node, "axes") is not None or (
        len(node.input) > 1 and bool(node.input[1])
    )


def _set_axes(graph: onnx.GraphProto, node: onnx.NodeProto, axes: list[int], opset: int) -> None:
    if opset < FIRST_OPSET_AXES_AS_INPUT:
        node.attribute.append(helper.make_attribute("axes", axes))
        return
    name = f"{node.name or node.output[0]}_axes"
    graph.initializer.append(numpy_helper.from_array(np.array(axes, np.int64), name))
    node.input.append(name)


def _same_values(name: str, before: np.ndarray, after: np.ndarray) -> None:
    squeezed = [size for size in after.shape if size != 1] == [s for s in before.shape if s != 1]
    if not squeezed or after.size != before.size:
        raise PassFailed(
            f"The state's batch could not be freed: at batch 1 output {name!r} is "
            f"{list(after.shape)} where the original gives {list(before.shape)}.",
            hint="Serve the model at batch 1 (several instances).",
        )
    expected = before.reshape(after.shape)
    if np.issubdtype(expected.dtype, np.floating):
        scale = float(np.max(np.abs(expected))) if expected.size else 0.0
        close = bool(np.all(np.abs(after - expected) <= RTOL * np.abs(expected) + ATOL * scale))
    else:
        close = bool(np.array_equal(after, expected))
    if not close:
        raise PassFailed(
            f"The state's batch could not be freed: at batch 1 output {name!r} differs from "
            "the original's.",
            hint="Serve the model at batch 1 (several instances).",
        )


def _constant(
    name: str, graph: onnx.GraphProto, producers: dict[str, onnx.NodeProto]
) -> np.ndarray | None:
    """The value of an initializer or a Constant node; None for anything computed."""
    init = next((i for i in graph.initializer if i.name == name), None)
    if init is not None:
        return numpy_helper.to_array(init)
    node = producers.get(name)
    if node is not None and node.op_type == "Constant" and node.attribute:
        return numpy_helper.to_array(node.attribute[0].t)
    return None


def _dims(value: onnx.ValueInfoProto) -> list[int | str | None]:
    tensor = value.type.tensor_type
    if not tensor.HasField("shape"):
        return []
    return [
        d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim
    ]


def _int_attribute(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((int(a.i) for a in node.attribute if a.name == name), default)


def _ints_attribute(node: onnx.NodeProto, name: str) -> list[int] | None:
    return next((list(a.ints) for a in node.attribute if a.name == name), None)
