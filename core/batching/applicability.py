"""Whether dynamic batching applies to a model, and on which axes requests stack.

`batch_dim_problem` is the plain rule (a Triton config's): every input and output needs a
dynamic dim 0. `stack_axes` is the Pipeline's: requests stack on each input's batch axis
(inferred, or set by the user: a state [layers, batch, hidden] on axis 1); an input without
one is shared (requests batch together only when they carry the same value); an output is
split on its batch axis, or, when it has none (a scalar), given whole to every request.
"""

from __future__ import annotations

from dataclasses import dataclass

from optistudio.core.data.batch import (
    BatchAxes,
    batch_axes_of,
    batch_dim_names,
    check_batch_axes,
)
from optistudio.core.errors import InvalidSpec
from optistudio.core.model.info import ModelInfo, TensorSpec


def batch_dim_problem(info: ModelInfo) -> str | None:
    """Why requests cannot be stacked along dim 0 of this model, or None when they can."""
    for kind, specs in (("input", info.inputs), ("output", info.outputs)):
        for spec in specs:
            reason = _tensor_problem(kind, spec)
            if reason:
                return reason
    if not info.inputs:
        return "The model has no inputs."
    return None


def require_batch_dim(info: ModelInfo) -> None:
    """Raise InvalidSpec saying why batching does not apply, when it does not."""
    problem = batch_dim_problem(info)
    if problem:
        raise InvalidSpec(
            f"Dynamic batching does not apply to this model: {problem}",
            hint="Export the model with a dynamic first (batch) dimension on every input and "
            "output, e.g. torch.onnx.export(..., dynamic_axes={'input': {0: 'batch'}}).",
        )


NON_TENSOR_DTYPES = ("sequence", "map", "optional", "opaque", "undefined")
"""What intake calls a value that is not a tensor (optistudio.core.model.intake)."""


def _tensor_problem(kind: str, spec: TensorSpec) -> str | None:
    if spec.dtype in NON_TENSOR_DTYPES:
        return (
            f"{kind} {spec.name!r} is a {spec.dtype}, not a tensor, so it cannot be split "
            "into one answer per request (skl2onnx writes a tensor with "
            "options={'zipmap': False})."
        )
    if not spec.shape:
        return f"{kind} {spec.name!r} is a scalar, so it has no batch dimension to stack along."
    first = spec.shape[0]
    if isinstance(first, int) and first > 0:
        return (
            f"{kind} {spec.name!r} has a fixed first dimension of {first}, so requests cannot "
            "be stacked into one larger batch."
        )
    return None


@dataclass(frozen=True)
class StackAxes:
    """Where requests stack: each input's batch axis (None: shared, the requests of a batch
    carry the same value, e.g. a sample rate) and each output's, in model order (None: the
    output is the batch's as a whole, e.g. a scalar, and every request gets it)."""

    inputs: dict[str, int | None]
    outputs: tuple[int | None, ...]


def stack_axes(info: ModelInfo, batch_axes: BatchAxes | None = None) -> StackAxes:
    """The axes requests stack on: each input's batch axis (`batch_axes` wins over the
    inferred one), and each output's: the dim named like an input's batch, else a dynamic
    dim 0, else the one dynamic dim of an output whose dim 0 is fixed (a state [layers,
    batch, hidden]), else none. Raises InvalidSpec saying why requests cannot stack."""
    problem = stacking_problem(info, batch_axes)
    if problem:
        raise InvalidSpec(
            f"Dynamic batching does not apply to this model: {problem}",
            hint="Set the batch axis of each input that has one (the model card, or "
            "--batch-axis NAME=K), or export the model with a dynamic batch dimension.",
        )
    inputs = batch_axes_of(info.inputs, batch_axes)
    names = batch_dim_names(info.inputs, batch_axes)
    return StackAxes(inputs, tuple(_output_axis(spec, names) for spec in info.outputs))


def stacking_problem(info: ModelInfo, batch_axes: BatchAxes | None = None) -> str | None:
    """Why requests cannot be stacked on the inputs' batch axes, or None when they can."""
    check_batch_axes(info.inputs, batch_axes)
    axes = batch_axes_of(info.inputs, batch_axes)
    for kind, specs in (("input", info.inputs), ("output", info.outputs)):
        for spec in specs:
            if spec.dtype in NON_TENSOR_DTYPES:
                return _tensor_problem(kind, spec)
    for spec in info.inputs:
        axis = axes[spec.name]
        size = spec.shape[axis] if axis is not None else None
        if isinstance(size, int) and size > 0:
            where = "first dimension" if axis == 0 else f"batch dimension (axis {axis})"
            return (
                f"input {spec.name!r} has a fixed {where} of {size}, so requests cannot be "
                "stacked into one larger batch."
            )
    if all(axis is None for axis in axes.values()):
        return "no input has a batch axis to stack requests along."
    names = batch_dim_names(info.inputs, batch_axes)
    for spec in info.outputs:
        if _output_axis(spec, names) == _UNCLEAR:
            return (
                f"output {spec.name!r} {spec.shape} has several dynamic dims and none is named "
                "like the inputs' batch, so it cannot be split back to the requests."
            )
    return None


_UNCLEAR = -1


def _output_axis(spec: TensorSpec, batch_names: frozenset[str]) -> int | None:
    named = [i for i, dim in enumerate(spec.shape) if isinstance(dim, str) and dim in batch_names]
    if named:
        return named[0]
    dynamic = [i for i, dim in enumerate(spec.shape) if not (isinstance(dim, int) and dim > 0)]
    if not dynamic:
        return None
    if dynamic[0] == 0 or len(dynamic) == 1:
        return dynamic[0]
    return _UNCLEAR


def one_row_axes(info: ModelInfo) -> StackAxes:
    """The axes of a model whose batch is fixed at 1, served one request per batch (max batch
    1): dim 0 of each input and output that is 1 or free (a batch of one is the request
    itself), none for the others (shared, or the batch's whole answer)."""

    def axis(spec: TensorSpec) -> int | None:
        first = spec.shape[0] if spec.shape else None
        return 0 if spec.shape and (first == 1 or not isinstance(first, int)) else None

    inputs = {spec.name: axis(spec) for spec in info.inputs}
    return StackAxes(inputs, tuple(axis(spec) for spec in info.outputs))
