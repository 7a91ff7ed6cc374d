"""Which axis of each input is the batch, and which batch sizes a model can run at.

An input's batch axis is dim 0, or, when dim 0 is fixed, the first dim named like another
input's dynamic dim 0 (a state [layers, 'batch', hidden] beside an audio ['batch', 'time']:
ONNX gives one symbolic name one size). A full shape given for an input is used exactly; it
also sizes every input batched on a dim of the same name (`pinned_batches`). The remaining
inputs (`swept_inputs`) take the batch sizes; when none remain, the batch is the one the shapes
imply (`implied_batch_size`).

A user may set an input's batch axis (`axes`, the input profile's batch_axes, the CLI's
--batch-axis NAME=K): a state [2, '?', 64] beside an audio ['batch', 'time'] shares no dim
name, so nothing tells that axis 1 is its batch until someone says so. A set axis wins over
the inferred one; None takes the input off the batch (run at its full shape). Every function
here takes `axes` and passes it on.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TypeGuard

from optistudio.core.errors import DataMismatch, InvalidSpec
from optistudio.core.model.info import Dim, TensorSpec

BatchAxes = Mapping[str, int | None]
"""Batch axes a user set, by input name (None: no batch axis)."""


def batch_dim_names(specs: list[TensorSpec], axes: BatchAxes | None = None) -> frozenset[str]:
    """Symbolic names of the inputs' batch dims: each input's dynamic dim 0, or the dim at
    the axis set in `axes`: the model's name(s) for its batch."""
    axes = axes or {}
    names = set()
    for spec in specs:
        axis = axes.get(spec.name, 0)
        dim = spec.shape[axis] if axis is not None and axis < len(spec.shape) else None
        if isinstance(dim, str):
            names.add(dim)
    return frozenset(names)


def batch_axis(
    spec: TensorSpec, batch_names: Collection[str], axes: BatchAxes | None = None
) -> int | None:
    """The axis of `spec` that takes the batch size; None for a scalar.

    The axis set in `axes` when there is one. Else dim 0, unless dim 0 is fixed and a later
    dim carries a batch name: a state [2, 'batch', 64] is batched on axis 1, not a fixed
    batch of 2.
    """
    if axes and spec.name in axes:
        return axes[spec.name]
    if not spec.shape:
        return None
    if _is_fixed(spec.shape[0]):
        named = (
            i for i, dim in enumerate(spec.shape) if isinstance(dim, str) and dim in batch_names
        )
        return next(named, 0)
    return 0


def check_batch_axes(specs: list[TensorSpec], axes: BatchAxes | None) -> None:
    """Raise InvalidSpec for a set batch axis that names no input or no axis of it."""
    by_name = {spec.name: spec for spec in specs}
    for name, axis in (axes or {}).items():
        if name not in by_name:
            raise InvalidSpec(
                f"A batch axis is set for {name!r}, which is no input of this model. "
                f"Inputs: {sorted(by_name)}.",
                hint="Check the input names on the model card.",
            )
        rank = len(by_name[name].shape)
        if axis is not None and not 0 <= axis < rank:
            raise InvalidSpec(
                f"Input {name!r} has {rank} axes (0..{rank - 1}); it cannot be batched on "
                f"axis {axis}.",
                hint=f"Give an axis below {rank}, or none to run it at its full shape.",
            )


def batch_axes_of(specs: list[TensorSpec], axes: BatchAxes | None = None) -> dict[str, int | None]:
    """Every input's batch axis: the one set in `axes`, else the inferred one."""
    names = batch_dim_names(specs, axes)
    return {spec.name: batch_axis(spec, names, axes) for spec in specs}


def pinned_batches(
    specs: list[TensorSpec], shapes: dict[str, list[int]], axes: BatchAxes | None = None
) -> dict[str, int]:
    """Batch dim names a full shape sizes, e.g. {'batch': 1} from input_ids [1, 128]: every
    input batched on a dim of that name has that batch (ONNX: one name, one size)."""
    names = batch_dim_names(specs, axes)
    pinned: dict[str, int] = {}
    for spec in specs:
        name, axis = batch_dim_name(spec, names, axes), batch_axis(spec, names, axes)
        if name is not None and axis is not None and spec.name in shapes:
            pinned.setdefault(name, shapes[spec.name][axis])
    return pinned


def swept_inputs(
    specs: list[TensorSpec], shapes: dict[str, list[int]], axes: BatchAxes | None = None
) -> list[TensorSpec]:
    """The inputs that take the batch size: with a batch axis, without a full shape, and not
    batched on a dim a full shape sizes (`pinned_batches`)."""
    names, pinned = batch_dim_names(specs, axes), pinned_batches(specs, shapes, axes)
    return [
        s
        for s in specs
        if s.name not in shapes
        and batch_axis(s, names, axes) is not None
        and batch_dim_name(s, names, axes) not in pinned
    ]


def batch_sizes_to_run(
    specs: list[TensorSpec],
    *,
    shapes: dict[str, list[int]],
    requested: list[int] | None,
    default: Sequence[int],
    axes: BatchAxes | None = None,
) -> list[int]:
    """The batch sizes the inputs without a full shape in `shapes` can run at.

    `requested` (None: `default` when the batch is dynamic, else the fixed batch). When no
    input is left to sweep (`swept_inputs`), the one batch the shapes imply. Raises InvalidSpec
    for a requested size a fixed batch, or the given shapes, refuse.
    """
    check_batch_axes(specs, axes)
    names = batch_dim_names(specs, axes)
    swept = swept_inputs(specs, shapes, axes)
    if not swept and shapes:
        return [_implied_batch(specs, shapes, requested, axes)]
    sizes = {s.name: s.shape[batch_axis(s, names, axes) or 0] for s in swept}
    fixed = {name: size for name, size in sizes.items() if _is_fixed(size)}
    dynamic = len(fixed) < len(sizes)
    if requested is None:
        return list(default) if dynamic and not fixed else sorted(set(fixed.values()) or {1})
    refusing = [(name, size) for name, size in fixed.items() if set(requested) != {size}]
    if refusing:
        name, size = refusing[0]
        raise InvalidSpec(
            f"This model has a fixed batch size of {size} (input {name!r}); batch sizes "
            f"{requested} cannot be run.",
            hint="Leave batch sizes empty, set the input's batch axis (--batch-axis NAME=K) or "
            "give its full shape (--shape) when its dim 0 is not the batch, or export the model "
            "with a dynamic batch dimension.",
        )
    return requested


def implied_batch_size(
    specs: list[TensorSpec], shapes: dict[str, list[int]], axes: BatchAxes | None = None
) -> int:
    """The batch that full shapes imply: the batch axis of the first input given a shape whose
    batch axis is dynamic (else of any input given a shape); 1 when none says."""
    names = batch_dim_names(specs, axes)
    given = [(s, batch_axis(s, names, axes)) for s in specs if s.name in shapes]
    batched = [(s, axis) for s, axis in given if axis is not None]
    dynamic = [(s, axis) for s, axis in batched if not _is_fixed(s.shape[axis])]
    for spec, axis in dynamic or batched:
        if axis < len(shapes[spec.name]):
            return shapes[spec.name][axis]
    return 1


def batch_of(
    specs: list[TensorSpec],
    shapes: dict[str, list[int]],
    batch_size: int,
    axes: BatchAxes | None = None,
) -> int:
    """The batch a run at `batch_size` really has: the one the full shapes imply when they
    leave no input to sweep, else `batch_size`."""
    if shapes and not swept_inputs(specs, shapes, axes):
        return implied_batch_size(specs, shapes, axes)
    return batch_size


def declared_batch(
    specs: list[TensorSpec],
    shapes: Mapping[str, list[int]] | None = None,
    axes: BatchAxes | None = None,
) -> int:
    """The batch a run takes when none is asked: the size every input that takes the batch
    (`swept_inputs`) declares fixed on its batch axis, when they all declare one and agree (a
    file declared [10, 3, 32, 32] is fed 10 samples a run); else 1. An open batch beside a
    fixed one leaves it at 1: that fixed dim may be a state's layers, not the batch."""
    names = batch_dim_names(specs, axes)
    swept = swept_inputs(specs, dict(shapes or {}), axes)
    sizes = {spec.shape[batch_axis(spec, names, axes) or 0] for spec in swept}
    only = next(iter(sizes)) if len(sizes) == 1 else None
    return only if _is_fixed(only) else 1


def check_whole_batches(samples: int, fixed_batch: int | None, what: str) -> None:
    """Raise DataMismatch when `samples` do not fill whole batches of a model whose batch is
    fixed (its last batch would be short, and the model refuses it); `what` names the data."""
    if fixed_batch and fixed_batch > 1 and samples % fixed_batch:
        raise DataMismatch(
            f"{what} holds {samples} sample(s), but this model runs {fixed_batch} at a time "
            f"(its batch is fixed at {fixed_batch}), so the last batch would be short.",
            hint=f"Give a multiple of {fixed_batch} samples, or free the model's dims (free "
            "dims: --free-dims, or the model card) to run any count.",
        )


def batch_dim_name(
    spec: TensorSpec, batch_names: Collection[str], axes: BatchAxes | None = None
) -> str | None:
    """The symbolic name of the input's batch axis; None when it has none or it is unnamed."""
    axis = batch_axis(spec, batch_names, axes)
    dim = spec.shape[axis] if axis is not None else None
    return dim if isinstance(dim, str) else None


def _implied_batch(
    specs: list[TensorSpec],
    shapes: dict[str, list[int]],
    requested: list[int] | None,
    axes: BatchAxes | None,
) -> int:
    implied = implied_batch_size(specs, shapes, axes)
    if requested is not None and requested != [implied]:
        raise InvalidSpec(
            f"The full shapes given make the batch {implied}; batch sizes {requested} cannot "
            "be run.",
            hint="Leave batch sizes empty, or give no full shape to the batched inputs so the "
            "batch sizes apply to them.",
        )
    return implied


def _is_fixed(dim: Dim) -> TypeGuard[int]:
    return isinstance(dim, int) and dim > 0
