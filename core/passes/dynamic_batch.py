"""Free a fixed batch: rewrite a graph declared at batch 1 so that its batch dimension is free.

Most exports carry their batch of 1 in two places: the declared inputs and outputs, and a few
constants (Reshape targets such as [1, -1, 85]). Changing only the declarations is dangerous:
ONNX Runtime then runs the Reshapes as written and silently merges the samples of a batch into
one ([1, 7098, 6] for two images instead of [2, 3549, 6]). So the rewrite

1. frees dim 0 of every input declared at 1 (named `BATCH_DIM`) and of every output declared
   at 1;
2. sets the leading 1 of each constant Reshape target whose data flows from those inputs to 0
   (ONNX: copy the input's dim), so the batch passes through;
3. refuses, naming the node, what pins or mixes the batch where no constant edit can free it:
   a Flatten at axis 0, a reduction over axis 0, a Split, Gather or Concat along axis 0 of
   batch-carrying data, a Reshape whose constant target folds the batch into another dim, an
   Expand to a constant batch above 1, a recurrent op's constant non-zero initial state, and
   dynamic quantization (one scale per tensor: each sample's would follow its batch);
4. drops the stored intermediate shapes and runs ONNX shape inference again.

It is verified, never trusted: `optistudio.core.passes.batch_check` runs the rewrite at batch N
against N runs of the original at batch 1, row for row.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.data.inputs import synthesize_inputs
from optistudio.core.errors import PassFailed
from optistudio.core.model.intake import inspect_model
from optistudio.core.model.ir_inputs import list_initializers
from optistudio.core.passes.base import PassContext, PassInfo, PassReport
from optistudio.core.passes.batch_check import check_free_batch

BATCH_DIM = "batch"
"""The name the rewrite gives the freed batch dimension."""
_REDUCE_OPS = frozenset(
    {
        "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
        "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin",
    }
)  # fmt: skip


_RECURRENT_OPS = frozenset({"LSTM", "GRU", "RNN"})
_PER_TENSOR_OPS = frozenset({"DynamicQuantizeLinear", "DynamicQuantizeMatMul"})
"""Dynamic quantization: the scale of each sample would follow the other samples of its batch."""
MAX_ROUNDS = 8
"""Rounds of rewriting and shape inference (one per chain of Reshapes that pin the batch)."""
_STATE_NAMES = {4: "sequence_lens", 5: "initial_h", 6: "initial_c"}


@dataclass
class BatchRewrite:
    """The rewritten model and what was changed, one line per edit."""

    model: onnx.ModelProto
    inputs: list[str]
    edits: list[str] = field(default_factory=list)


def fixed_batch_inputs(graph: onnx.GraphProto) -> list[str]:
    """The graph inputs (weights excluded) whose dim 0 is declared as the number 1."""
    weights = {init.name for init in graph.initializer}
    return [
        value.name
        for value in graph.input
        if value.name not in weights and _leading_dim(value) == 1
    ]


def free_batch(model: onnx.ModelProto) -> BatchRewrite:
    """A copy of `model` with its batch dimension free; PassFailed names what forbids it."""
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    graph = rewritten.graph
    inputs = fixed_batch_inputs(graph)
    if not inputs:
        raise PassFailed(
            "No input of this model has its batch fixed at 1: there is nothing to free.",
            hint="Batch it as it is; the batching and video jobs take a dynamic batch directly. "
            "A batch fixed at another number is freed by the free_dims recipe (--free-dims).",
        )
    result = BatchRewrite(model=rewritten, inputs=inputs)
    for value in graph.input:
        if value.name in inputs:
            _free_leading_dim(value)
    result.edits.append(f"inputs {', '.join(inputs)}: dim 0 from 1 to '{BATCH_DIM}'")
    _rewrite_nodes(rewritten, set(inputs), result)
    freed = [value.name for value in graph.output if _leading_dim(value) == 1]
    for value in graph.output:
        if value.name in freed:
            _free_leading_dim(value)
    if freed:
        result.edits.append(f"outputs {', '.join(freed)}: dim 0 from 1 to '{BATCH_DIM}'")
    del graph.value_info[:]
    result.model = onnx.shape_inference.infer_shapes(rewritten, strict_mode=False)
    if listed := list_initializers(result.model):  # an IR < 4 file lists its constants
        result.edits.append(
            f"IR {result.model.ir_version}: new constants {', '.join(listed)} listed as graph "
            "inputs too, as that IR version requires"
        )
    return result


def _rewrite_nodes(model: onnx.ModelProto, inputs: set[str], result: BatchRewrite) -> None:
    """Rewrite, round by round, the nodes whose data carries the batch: each freed Reshape lets
    shape inference carry the batch further, to the next Reshape that pinned it."""
    for _ in range(MAX_ROUNDS):
        leading = _leading_dims(model)
        before = len(result.edits)
        _rewrite_round(model.graph, inputs, leading, result)
        if len(result.edits) == before:
            return


def _rewrite_round(
    graph: onnx.GraphProto,
    inputs: set[str],
    leading: dict[str, int | str | None],
    result: BatchRewrite,
) -> None:
    constants = _constants(graph)
    carrying = set(inputs)  # tensors whose values depend on a batch-carrying input

    def batched(name: str) -> bool:
        """Dim 0 of `name` may be the batch: fed by the inputs, and inferred as a symbol, as
        1 (a Reshape upstream still pins it) or not at all. A number above 1 is not the batch
        (a bias whose values follow a dynamic quantization scale)."""
        dim = leading.get(name)
        return name in carrying and (dim is None or isinstance(dim, str) or dim == 1)

    for node in graph.node:
        if not any(name in carrying for name in node.input):
            continue
        if node.input and node.input[0]:
            _refuse_mixing(node, batched(node.input[0]), batched, leading, constants)
        if node.op_type == "Reshape" and batched(node.input[0]):
            _free_reshape(node, graph, constants, result)
        elif node.op_type in _RECURRENT_OPS and node.input[0] in carrying:
            _drop_zero_states(node, constants, result)
        if node.op_type not in ("Shape", "Size"):  # a shape is arithmetic on sizes, not data
            carrying.update(name for name in node.output if name)


def _leading_dims(model: onnx.ModelProto) -> dict[str, int | str | None]:
    """Dim 0 of every tensor shape inference can tell: a number, the batch's name, or None."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.value_info[:]
    inferred = onnx.shape_inference.infer_shapes(probe, strict_mode=False).graph
    found: dict[str, int | str | None] = {}
    for value in (*inferred.input, *inferred.value_info, *inferred.output):
        dims = value.type.tensor_type.shape.dim
        if not value.type.tensor_type.HasField("shape") or not dims:
            continue
        first = dims[0]
        found[value.name] = (
            first.dim_value
            if first.HasField("dim_value")
            else first.dim_param
            if first.HasField("dim_param")
            else None
        )
    return found


def _refuse_mixing(
    node: onnx.NodeProto,
    data_carries: bool,
    batched: Callable[[str], bool],
    leading: dict[str, int | str | None],
    constants: dict[str, np.ndarray],
) -> None:
    """PassFailed when `node` pins the batch or mixes samples in a way no constant edit frees."""
    axis = _attribute(node, "axis", 0 if node.op_type in ("Split", "Gather", "Concat") else 1)
    where = f"node {node.name or node.op_type!r} ({node.op_type})"
    problem = None
    if node.op_type == "Flatten" and data_carries and axis == 0:
        problem = "flattens the batch into its rows"
    elif node.op_type in ("Split", "Gather") and data_carries and axis == 0:
        problem = f"takes its {'parts' if node.op_type == 'Split' else 'rows'} along the batch"
    elif node.op_type == "Concat" and axis == 0 and any(batched(n) for n in node.input):
        if any(isinstance(leading.get(n), int) or n in constants for n in node.input if n):
            problem = "joins batch-1 tensors along the batch"
    elif node.op_type in _REDUCE_OPS and data_carries and _reduces_axis0(node, constants):
        problem = "reduces over the batch"
    elif node.op_type in _PER_TENSOR_OPS and data_carries:
        problem = "computes one quantization scale for the whole batch"
    elif node.op_type == "Expand" and _shape_pins_batch(node, constants):
        problem = "expands to a constant shape that starts with a batch above 1"
    if problem:
        raise PassFailed(
            f"The batch cannot be freed: {where} {problem}.",
            hint="Export the model again with a dynamic batch axis, or serve it as it is "
            "(batch 1, several instances).",
        )


def _free_reshape(
    node: onnx.NodeProto,
    graph: onnx.GraphProto,
    constants: dict[str, np.ndarray],
    result: BatchRewrite,
) -> None:
    if len(node.input) < 2 or node.input[1] not in constants:
        return  # a computed target follows the input's shape already
    target = constants[node.input[1]].astype(np.int64).reshape(-1)
    if target.size == 0 or target[0] in (0, -1):
        return  # copies dim 0, or infers it: the batch passes (checked by the run)
    where = f"node {node.name or 'Reshape'!r} (Reshape to {target.tolist()})"
    if target[0] != 1 or _attribute(node, "allowzero", 0) == 1:
        raise PassFailed(
            f"The batch cannot be freed: {where} folds the batch into another dimension.",
            hint="Export the model again with a dynamic batch axis, or serve it at batch 1.",
        )
    target[0] = 0
    name = _unique(graph, f"{node.input[1]}_batch_free")
    graph.initializer.append(numpy_helper.from_array(target, name))
    constants[name] = target
    node.input[1] = name
    result.edits.append(f"{where}: leading 1 to 0 (copy the batch)")


def _drop_zero_states(
    node: onnx.NodeProto, constants: dict[str, np.ndarray], result: BatchRewrite
) -> None:
    """A recurrent node's constant initial states are made for batch 1; zeros are also what
    the op starts from without them, so those inputs are left out. Others pin the batch."""
    where = f"node {node.name or node.op_type!r} ({node.op_type})"
    for index in (4, 5, 6):  # sequence_lens, initial_h, initial_c
        if index >= len(node.input) or not node.input[index]:
            continue
        state = constants.get(node.input[index])
        if index > 4 and state is not None and not np.any(state):
            result.edits.append(f"{where}: its all-zero {_STATE_NAMES[index]} left out")
            node.input[index] = ""
        elif state is not None:
            raise PassFailed(
                f"The batch cannot be freed: {where} takes a constant {_STATE_NAMES[index]} "
                "made for batch 1.",
                hint="Export the model again with a dynamic batch axis, or serve it at batch 1.",
            )
    while node.input and not node.input[-1]:
        node.input.pop()


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Initializers and Constant nodes' values, by tensor name."""
    found = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            found[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return found


def _reduces_axis0(node: onnx.NodeProto, constants: dict[str, np.ndarray]) -> bool:
    if node.op_type in ("ArgMax", "ArgMin"):
        return _attribute(node, "axis", 0) == 0
    axes: Iterable[int] | None = _ints(node, "axes")
    if axes is None and len(node.input) > 1 and node.input[1] in constants:
        axes = constants[node.input[1]].reshape(-1).tolist()
    if axes is None:  # no axes: every axis, unless noop_with_empty_axes
        return _attribute(node, "noop_with_empty_axes", 0) == 0
    return 0 in list(axes)


def _shape_pins_batch(node: onnx.NodeProto, constants: dict[str, np.ndarray]) -> bool:
    shape = constants.get(node.input[1]) if len(node.input) > 1 else None
    return shape is not None and shape.size > 0 and int(shape.reshape(-1)[0]) > 1


def _leading_dim(value: onnx.ValueInfoProto) -> int | None:
    dims = value.type.tensor_type.shape.dim
    if not value.type.tensor_type.HasField("shape") or not dims:
        return None
    return dims[0].dim_value if dims[0].HasField("dim_value") else None


def _free_leading_dim(value: onnx.ValueInfoProto) -> None:
    dim = value.type.tensor_type.shape.dim[0]
    dim.Clear()
    dim.dim_param = BATCH_DIM


def _attribute(node: onnx.NodeProto, name: str, default: int) -> int:
    for attribute in node.attribute:
        if attribute.name == name:
            return int(attribute.i)
    return default


def _ints(node: onnx.NodeProto, name: str) -> list[int] | None:
    for attribute in node.attribute:
        if attribute.name == name:
            return list(attribute.ints)
    return None


def _unique(graph: onnx.GraphProto, name: str) -> str:
    taken = {init.name for init in graph.initializer} | {o for n in graph.node for o in n.output}
    candidate, index = name, 1
    while candidate in taken:
        candidate, index = f"{name}_{index}", index + 1
    return candidate


# --- the pass ------------------------------------------------------------------------------


class DynamicBatchConfig(BaseModel):
    """Options of the dynamic-batch pass."""

    model_config = ConfigDict(extra="forbid")

    check_batch: int = Field(
        default=3, ge=2, le=16, description="The batch the rewrite is checked at."
    )
    dims: dict[str, int] = Field(
        default_factory=dict,
        description="Sizes of the model's other dynamic dims for the check (its input profile).",
    )


def run_dynamic_batch(
    model: Path, out: Path, config: DynamicBatchConfig, context: PassContext
) -> PassReport:
    """Free the batch, save the rewrite, and check it against batch-1 runs of the original."""
    context.progress(0.1, "freeing the batch dimension")
    rewrite = free_batch(onnx.load(str(model)))
    onnx.save(rewrite.model, str(out))
    context.progress(0.5, f"checking batch {config.check_batch} against runs at batch 1")
    samples = _check_samples(model, config, context, rewrite.inputs)
    check = check_free_batch(model, out, samples, rewrite.inputs)
    details = {"edits": rewrite.edits, "batch_inputs": rewrite.inputs, "check": check.line()}
    return PassReport(output=out, details=details)


def _check_samples(
    model: Path, config: DynamicBatchConfig, context: PassContext, batched: list[str]
) -> list[dict[str, np.ndarray]]:
    """The batch-1 samples the rewrite is checked on: the run's calibration samples (real
    inputs at the model's real shapes, as optimize gives them) when there are enough, else
    inputs synthesised at `config.dims`."""
    if context.calibration is not None:
        samples = list(itertools.islice(context.calibration.batches(), config.check_batch))
        if len(samples) >= 2 and all(_at_batch_1(sample, batched) for sample in samples):
            return samples
    specs = inspect_model(model).inputs
    return [
        synthesize_inputs(specs, batch_size=1, dims=config.dims, seed=seed)[0]
        for seed in range(config.check_batch)
    ]


def _at_batch_1(sample: dict[str, np.ndarray], batched: list[str]) -> bool:
    return all(name in sample and sample[name].shape[:1] == (1,) for name in batched)


DYNAMIC_BATCH = PassInfo(
    name="dynamic_batch",
    label="Dynamic batch",
    description="Free a batch fixed at 1: the declared dims and the Reshape targets that pin "
    "it, checked row for row against runs at batch 1; graphs that mix the batch are refused.",
    config="optistudio.core.passes.dynamic_batch:DynamicBatchConfig",
    implementation="optistudio.core.passes.dynamic_batch:run_dynamic_batch",
    changes_outputs=True,
)
