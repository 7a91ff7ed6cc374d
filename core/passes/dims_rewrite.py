"""Rewrite a graph so that declared dims it does not need are free (the graph part of
`optistudio.core.passes.free_dims`).

Exporters bake the sizes they traced with into three places: the declared inputs and outputs,
the stored intermediate shapes (value_info), and constants such as Reshape targets and Expand
shapes. The rewrite

1. names each freed input dim (`batch` on the batch axis; `height` / `width` on axes 2 and 3 of
   an image [N, C, H, W]; `length` on the last axis of a sequence; else `dimK`, prefixed by the
   input's name when several inputs free such a dim) and leaves every output dim the runs will
   decide open (`finish_outputs` names those that moved and puts the others back);
2. derives, round by round, each constant Reshape target whose data changes shape with the
   freed dims. Shape inference runs at the declared sizes (A) and at the freed dims doubled (B);
   for a target t over data of shape a at A and b at B:
   - t[i] equal to a[i] where a[i] != b[i] copies that dim: 0 (ONNX: take the input's dim);
   - t[i] equal to a[i] where a[i] == b[i] is a kept size and stays;
   - when what is left must still grow (prod(b) over the copied dims differs from the product
     of the kept entries), the one entry divisible by the product of the moving dims of a that
     are not copied becomes -1; none, or several (a target whose sizes cannot be told apart),
     is a refusal naming the node;
3. sets to 1 the entries of a constant Expand shape that repeat a moving dim of its data
   (broadcasting keeps the data's own size);
4. drops the stored intermediate shapes and runs ONNX shape inference again.

Whether the result computes what the file does is not decided here: `dims_check` runs it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from optistudio.core.errors import PassFailed
from optistudio.core.model.ir_inputs import list_initializers

MAX_ROUNDS = 8
"""Rounds of deriving and shape inference (one per chain of Reshapes that pin a dim)."""
OPEN_OUTPUT = "free_dims_open"
"""The placeholder an output dim carries until the runs have shown whether it moves."""
HINT = "Export the model again with these dims dynamic, or run it at the sizes it declares."

Axes = dict[str, list[int]]
"""Axes to free, by input name."""


@dataclass
class DimsRewrite:
    """The rewritten model, the dims it frees (input -> axis -> name) and one line per edit."""

    model: onnx.ModelProto
    names: dict[str, dict[int, str]]
    edits: list[str] = field(default_factory=list)


def declared_shapes(graph: onnx.GraphProto) -> dict[str, list[int | str | None]]:
    """Each data input's declared dims (weights excluded): a number, a name, or None."""
    weights = {init.name for init in graph.initializer}
    return {v.name: _dims(v) for v in graph.input if v.name not in weights}


def free_axes(
    model: onnx.ModelProto,
    axes: Axes,
    batch_axes: dict[str, int | None],
    sizes: Axes | None = None,
) -> DimsRewrite:
    """A copy of `model` with `axes` of its inputs free and the constants that pinned them
    derived; PassFailed names a constant that cannot be. `sizes`: the inputs' full shapes at
    the declared sizes (the dynamic dims' too), where known."""
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    graph = rewritten.graph
    names = dim_names(axes, batch_axes, declared_shapes(graph))
    result = DimsRewrite(model=rewritten, names=names)
    declared = declared_shapes(graph)
    for value in graph.input:
        for axis, name in names.get(value.name, {}).items():
            _set_dim(value, axis, name)
    for name, freed in names.items():
        shape = [freed.get(i, d) for i, d in enumerate(declared[name])]
        result.edits.append(f"input {name!r}: {declared[name]} -> {shape}")
    for value in graph.output:
        for axis, dim in enumerate(_dims(value)):
            if isinstance(dim, int):
                _set_dim(value, axis, f"{OPEN_OUTPUT}_{axis}")
    sizes_a = {n: (sizes or {}).get(n) or _numbers(declared[n]) for n in names}
    sizes_b = {n: [s * 2 if i in names[n] else s for i, s in enumerate(sizes_a[n])] for n in names}
    _derive_constants(rewritten, sizes_a, sizes_b, result)
    del graph.value_info[:]
    if listed := list_initializers(rewritten):  # an IR < 4 file lists its constants
        result.edits.append(f"new constants {', '.join(listed)} listed as graph inputs (IR < 4)")
    result.model = rewritten
    return result


def dim_names(
    axes: Axes, batch_axes: dict[str, int | None], declared: dict[str, list[int | str | None]]
) -> dict[str, dict[int, str]]:
    """The name each freed dim gets (module docstring, step 1)."""
    several = sum(1 for name, freed in axes.items() if set(freed) - {batch_axes.get(name)}) > 1
    names: dict[str, dict[int, str]] = {}
    for name, freed in axes.items():
        rank = len(declared[name])
        names[name] = {}
        for axis in sorted(freed):
            role = _role(axis, rank, batch_axes.get(name))
            prefix = f"{name}_" if several and role != "batch" else ""
            names[name][axis] = prefix + role
    return names


def finish_outputs(
    model: onnx.ModelProto,
    declared: dict[str, list[int | str | None]],
    moved: dict[str, dict[int, str]],
) -> None:
    """Each output dim left open: its declared number again, or the name `moved` gives it
    (the runs showed it follows the freed dims); then shape inference over the whole graph."""
    for value in model.graph.output:
        for axis, dim in enumerate(_dims(value)):
            if isinstance(dim, str) and dim.startswith(OPEN_OUTPUT):
                name = moved.get(value.name, {}).get(axis)
                _set_dim(value, axis, name if name else declared[value.name][axis])
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    del model.graph.value_info[:]
    model.graph.value_info.extend(inferred.graph.value_info)


def output_shapes(graph: onnx.GraphProto) -> dict[str, list[int | str | None]]:
    """Each output's declared dims."""
    return {value.name: _dims(value) for value in graph.output}


def _role(axis: int, rank: int, batch_axis: int | None) -> str:
    if axis == batch_axis:
        return "batch"
    if rank == 4 and axis in (2, 3):
        return "height" if axis == 2 else "width"
    if rank in (2, 3) and axis == rank - 1:
        return "length"
    return f"dim{axis}"


def _derive_constants(
    model: onnx.ModelProto, sizes_a: Axes, sizes_b: Axes, result: DimsRewrite
) -> None:
    for _ in range(MAX_ROUNDS):
        at_a, at_b = _shapes_at(model, sizes_a), _shapes_at(model, sizes_b)
        constants = _constants(model.graph)
        before = len(result.edits)
        for node in model.graph.node:
            if node.op_type in ("Reshape", "Expand") and len(node.input) > 1:
                _derive(node, model.graph, constants, at_a, at_b, result)
        if len(result.edits) == before:
            return


def _derive(
    node: onnx.NodeProto,
    graph: onnx.GraphProto,
    constants: dict[str, np.ndarray],
    at_a: dict[str, list[int] | None],
    at_b: dict[str, list[int] | None],
    result: DimsRewrite,
) -> None:
    """Rewrite `node`'s constant shape input where its data's shape moves with the dims."""
    data_a, data_b = at_a.get(node.input[0]), at_b.get(node.input[0])
    if node.input[1] not in constants or data_a is None or data_b is None or data_a == data_b:
        return
    target = constants[node.input[1]].astype(np.int64).reshape(-1).tolist()
    where = f"node {node.name or node.op_type!r} ({node.op_type} to {target})"
    if node.op_type == "Reshape":
        derived = reshape_target(target, data_a, data_b, where, _allowzero(node))
    else:
        derived = expand_shape(target, data_a, data_b)
    if derived == target:
        return
    name = _unique(graph, f"{node.input[1]}_free")
    graph.initializer.append(numpy_helper.from_array(np.array(derived, dtype=np.int64), name))
    node.input[1] = name
    result.edits.append(f"{where}: {derived}")


def reshape_target(
    target: list[int], a: list[int], b: list[int], where: str, allowzero: bool = False
) -> list[int]:
    """A Reshape target that follows data shaped `a` at the declared sizes and `b` with the
    freed dims moved (module docstring, step 2); PassFailed when it cannot be derived."""
    derived = list(target)
    copied = {i for i, size in enumerate(target) if size == 0}
    for i, size in enumerate(target):
        if size > 0 and i < len(a) and size == a[i] != b[i] and not allowzero:
            derived[i] = 0
            copied.add(i)
    if -1 in derived:
        return derived
    kept = [i for i, size in enumerate(derived) if size > 0]
    rest_b = math.prod(b) // math.prod(b[i] for i in copied if i < len(b))
    if math.prod(derived[i] for i in kept) == rest_b:
        return derived
    moving = math.prod(a[i] for i in range(len(a)) if i not in copied and a[i] != b[i])
    candidates = [
        i
        for i in kept
        if derived[i] % moving == 0 and not (i < len(a) and derived[i] == a[i] == b[i])
    ]
    if len(candidates) != 1:
        raise PassFailed(
            f"The dims cannot be freed: {where} bakes a size that cannot be derived from them "
            f"(its data is {a} at the declared sizes, {b} with them doubled).",
            hint=HINT,
        )
    derived[candidates[0]] = -1
    return derived


def expand_shape(shape: list[int], a: list[int], b: list[int]) -> list[int]:
    """An Expand shape whose entries that repeat a moving dim of its data are 1 (the data's own
    size is kept by broadcasting); others are left for the runs to judge."""
    offset = len(shape) - len(a)
    return [
        1 if 0 <= i - offset < len(a) and size == a[i - offset] != b[i - offset] else size
        for i, size in enumerate(shape)
    ]


def _shapes_at(model: onnx.ModelProto, sizes: Axes) -> dict[str, list[int] | None]:
    """Every tensor's shape shape inference finds with the inputs at `sizes` (None: a dim it
    could not tell)."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for value in probe.graph.input:
        for axis, size in enumerate(sizes.get(value.name, [])):
            _set_dim(value, axis, size)
    del probe.graph.value_info[:]
    try:
        inferred = onnx.shape_inference.infer_shapes(probe, strict_mode=False, data_prop=True)
    except Exception:  # onnx raises its own untyped errors on a graph it cannot follow
        return {}
    found: dict[str, list[int] | None] = {}
    for value in (*inferred.graph.input, *inferred.graph.value_info):
        dims = _dims(value)
        found[value.name] = dims if all(isinstance(d, int) for d in dims) else None  # type: ignore[assignment]
    return found


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    found = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            found[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return found


def _dims(value: onnx.ValueInfoProto) -> list[int | str | None]:
    tensor = value.type.tensor_type
    if not tensor.HasField("shape"):
        return []
    return [
        d.dim_value if d.HasField("dim_value") else d.dim_param if d.HasField("dim_param") else None
        for d in tensor.shape.dim
    ]


def _numbers(dims: list[int | str | None]) -> list[int]:
    return [d if isinstance(d, int) and d > 0 else 1 for d in dims]


def _set_dim(value: onnx.ValueInfoProto, axis: int, size: int | str | None) -> None:
    dim = value.type.tensor_type.shape.dim[axis]
    dim.Clear()
    if isinstance(size, int):
        dim.dim_value = size
    elif isinstance(size, str):
        dim.dim_param = size


def _allowzero(node: onnx.NodeProto) -> bool:
    return any(a.name == "allowzero" and a.i == 1 for a in node.attribute)


def _unique(graph: onnx.GraphProto, name: str) -> str:
    taken = {init.name for init in graph.initializer} | {o for n in graph.node for o in n.output}
    candidate, index = name, 1
    while candidate in taken:
        candidate, index = f"{name}_{index}", index + 1
    return candidate
