"""Which axis of each input is the batch, and which batch sizes a model can run at.

An input's batch axis is dim 0, or, when dim 0 is fixed, the first dim named like another
input's dynamic dim 0 (a state [layers, 'batch', hidden] beside an audio ['batch', 'time']:
ONNX gives one symbolic name one size). A full shape given for an input is used exactly; it
also sizes every input batched on a dim of the same name (`pinned_batches`). The remaining
inputs (`swept_inputs`) take the batch sizes; when none remain, the batch is the one the shapes
imply (`implied_batch_size`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TypeGuard

from optistudio.core.errors import InvalidSpec
from optistudio.core.model.info import Dim, TensorSpec


def batch_dim_names(specs: list[TensorSpec]) -> frozenset[str]:
    """Symbolic names of the inputs' dynamic dim 0: the model's name(s) for its batch."""
    return frozenset(s.shape[0] for s in specs if s.shape and isinstance(s.shape[0], str))


def batch_axis(spec: TensorSpec, batch_names: Collection[str]) -> int | None:
    """The axis of `spec` that takes the batch size; None for a scalar.

    Dim 0, unless dim 0 is fixed and a later dim carries a batch name: a state
    [2, 'batch', 64] is batched on axis 1, not a fixed batch of 2.
    """
    if not spec.shape:
        return None
    if _is_fixed(spec.shape[0]):
        named = (
            i for i, dim in enumerate(spec.shape) if isinstance(dim, str) and dim in batch_names
        )
        return next(named, 0)
    return 0


def pinned_batches(specs: list[TensorSpec], shapes: dict[str, list[int]]) -> dict[str, int]:
    """Batch dim names a full shape sizes, e.g. {'batch': 1} from input_ids [1, 128]: every
    input batched on a dim of that name has that batch (ONNX: one name, one size)."""
    names = batch_dim_names(specs)
    pinned: dict[str, int] = {}
    for spec in specs:
        name, axis = batch_dim_name(spec, names), batch_axis(spec, names)
        if name is not None and axis is not None and spec.name in shapes:
            pinned.setdefault(name, shapes[spec.name][axis])
    return pinned


def swept_inputs(specs: list[TensorSpec], shapes: dict[str, list[int]]) -> list[TensorSpec]:
    """The inputs that take the batch size: with a batch axis, without a full shape, and not
    batched on a dim a full shape sizes (`pinned_batches`)."""
    names, pinned = batch_dim_names(specs), pinned_batches(specs, shapes)
    return [
        s
        for s in specs
        if s.name not in shapes
        and batch_axis(s, names) is not None
        and batch_dim_name(s, names) not in pinned
    ]


def batch_sizes_to_run(
    specs: list[TensorSpec],
    *,
    shapes: dict[str, list[int]],
    requested: list[int] | None,
    default: Sequence[int],
) -> list[int]:
    """The batch sizes the inputs without a full shape in `shapes` can run at.

    `requested` (None: `default` when the batch is dynamic, else the fixed batch). When no
    input is left to sweep (`swept_inputs`), the one batch the shapes imply. Raises InvalidSpec
    for a requested size a fixed batch, or the given shapes, refuse.
    """
    names = batch_dim_names(specs)
    swept = swept_inputs(specs, shapes)
    if not swept and shapes:
        return [_implied_batch(specs, shapes, requested)]
    sizes = {s.name: s.shape[batch_axis(s, names) or 0] for s in swept}
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
            hint="Leave batch sizes empty, give the input's full shape (--shape) when its dim 0 "
            "is not the batch, or export the model with a dynamic batch dimension.",
        )
    return requested


def implied_batch_size(specs: list[TensorSpec], shapes: dict[str, list[int]]) -> int:
    """The batch that full shapes imply: the batch axis of the first input given a shape whose
    batch axis is dynamic (else of any input given a shape); 1 when none says."""
    names = batch_dim_names(specs)
    given = [(s, batch_axis(s, names)) for s in specs if s.name in shapes]
    batched = [(s, axis) for s, axis in given if axis is not None]
    dynamic = [(s, axis) for s, axis in batched if not _is_fixed(s.shape[axis])]
    for spec, axis in dynamic or batched:
        if axis < len(shapes[spec.name]):
            return shapes[spec.name][axis]
    return 1


def batch_of(specs: list[TensorSpec], shapes: dict[str, list[int]], batch_size: int) -> int:
    """The batch a run at `batch_size` really has: the one the full shapes imply when they
    leave no input to sweep, else `batch_size`."""
    if shapes and not swept_inputs(specs, shapes):
        return implied_batch_size(specs, shapes)
    return batch_size


def batch_dim_name(spec: TensorSpec, batch_names: Collection[str]) -> str | None:
    """The symbolic name of the input's batch axis; None when it has none or it is unnamed."""
    axis = batch_axis(spec, batch_names)
    dim = spec.shape[axis] if axis is not None else None
    return dim if isinstance(dim, str) else None


def _implied_batch(
    specs: list[TensorSpec], shapes: dict[str, list[int]], requested: list[int] | None
) -> int:
    implied = implied_batch_size(specs, shapes)
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
