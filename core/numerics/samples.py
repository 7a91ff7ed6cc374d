"""Outputs read per sample from the shapes a run really returns, not the ones declared.

A declared output shape is a promise no runtime checks: a recognizer declared [1, seqlen]
returns [2, 1, 8210] for one image, and a variant made from it [1, 16420]. So each output of a
batch that fed `rows` samples is read as a matrix [rows, values] from its real shape:

- one sample fed (a fixed batch of 1, or a last batch of one): the whole output is its row;
- else the axis that holds the samples: the first axis of size `rows` that the declaration (of
  the same rank) leaves dynamic, else the first axis of size `rows` (axis 1 of a [T, N, C]);
  that axis is moved first and the rest flattened in row-major order;
- no axis of size `rows` (an output that is not per sample, e.g. a scalar): one row.

Two models' outputs compare value by value when these matrices have the same shape, or, failing
that, the same number of values (both then cut into `rows` equal rows in row-major order, one row
when that does not divide). Anything else is another output (`OutputsDiffer`): the variant's or
the runtime's doing, never the user's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from optistudio.core.data.batch import BatchAxes, batch_axis, batch_dim_names
from optistudio.core.errors import OutputsDiffer
from optistudio.core.model.info import Dim, TensorSpec

Declared = Sequence[Dim] | None
"""An output's declared shape; None (or []) when the model declares none."""


def fed_rows(
    batch: dict[str, np.ndarray], inputs: list[TensorSpec], axes: BatchAxes | None = None
) -> int:
    """How many samples a batch of inputs holds: the size of the first input's batch axis
    (`core.data.batch.batch_axis`, `axes` winning), else of the first input's axis 0; 1 when
    no input has an axis."""
    names = batch_dim_names(inputs, axes)
    for spec in inputs:
        array = batch.get(spec.name)
        axis = batch_axis(spec, names, axes)
        if array is not None and axis is not None and axis < array.ndim:
            return int(array.shape[axis])
    first = next(iter(batch.values()), None)
    return int(first.shape[0]) if first is not None and first.ndim else 1


def keeps_declaration(shape: tuple[int, ...], declared: Declared) -> bool:
    """Whether a real shape is what was declared: the same rank, every fixed dim the same
    (no declaration: nothing to break)."""
    if not declared:
        return True
    if len(declared) != len(shape):
        return False
    return all(not _fixed(dim) or dim == real for dim, real in zip(declared, shape, strict=True))


def sample_axis(shape: tuple[int, ...], rows: int, declared: Declared = None) -> int | None:
    """The axis of a real `shape` that holds the `rows` samples fed; None when the whole
    output is one row (one sample fed, or no axis of that size)."""
    if rows <= 1:
        return None
    sized = [axis for axis, length in enumerate(shape) if length == rows]
    declared_rank = bool(declared) and len(declared or []) == len(shape)
    dynamic = [axis for axis in sized if declared_rank and not _fixed((declared or [])[axis])]
    chosen = dynamic or sized
    return chosen[0] if chosen else None


def sample_view(output: np.ndarray, rows: int, declared: Declared = None) -> np.ndarray:
    """[rows, values] float64 of one output, the samples on the axis `sample_axis` finds;
    [1, values] when the whole output is one row."""
    array = np.asarray(output)
    axis = sample_axis(array.shape, rows, declared)
    if axis is None:
        return array.astype(np.float64).reshape(1, -1)
    return np.moveaxis(array, axis, 0).astype(np.float64).reshape(rows, -1)


def paired_views(
    name: str,
    reference: np.ndarray,
    candidate: np.ndarray,
    rows: int,
    declared: tuple[Declared, Declared] = (None, None),
) -> tuple[np.ndarray, np.ndarray]:
    """Both models' output `name` as matrices of the same shape (module docstring);
    OutputsDiffer when they hold another number of values."""
    ref = sample_view(reference, rows, declared[0])
    cand = sample_view(candidate, rows, declared[1])
    if ref.shape == cand.shape:
        return ref, cand
    if ref.size != cand.size:
        raise OutputsDiffer(
            f"Output {name!r} holds {cand.size} values for {rows} sample(s) in the variant "
            f"and {ref.size} in the original (shapes: original {list(np.shape(reference))}, "
            f"variant {list(np.shape(candidate))}); the variant computes something else.",
            hint="The variant, not your model or data, is at fault: use another variant, or "
            "report this with the model.",
        )
    parts = rows if ref.size % max(rows, 1) == 0 else 1
    return ref.reshape(parts, -1), cand.reshape(parts, -1)


def shape_note(
    name: str, declared: Declared, reference: tuple[int, ...], candidate: tuple[int, ...]
) -> str | None:
    """'y declared [1, seqlen]: the original returns [2, 1, 8210], the variant [1, 16420]'
    when the real shapes differ from each other or from the declaration; else None."""
    if reference == candidate and keeps_declaration(reference, declared):
        return None
    said = f"{name} declared {dims_text(declared)}" if declared else name
    if reference == candidate:
        return f"{said}: both return {list(reference)}"
    return f"{said}: the original returns {list(reference)}, the variant {list(candidate)}"


def dims_text(declared: Declared) -> str:
    """'[1, seqlen]': a declared shape as written, '?' for an unnamed dynamic dim."""
    return "[" + ", ".join("?" if dim is None else str(dim) for dim in declared or []) + "]"


def _fixed(dim: Dim) -> bool:
    return isinstance(dim, int) and dim > 0
