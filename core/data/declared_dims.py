"""The offer a refused shape carries when it only conflicts with dims the file declares as numbers.

Exporters fix every dim they traced with (a face detector declared [10, 3, 32, 32] whose package
feeds 1x3x480x640). Such a shape is still refused where it is checked (`inputs`,
`input_profile`), but the refusal says what would let it run: the free-dims rewrite
(`optistudio.core.passes.free_dims`), which frees the declared dims the graph does not need and
checks the rewrite first. This module only words the offer; it runs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from optistudio.core.model.info import TensorSpec


def fixed_dims_offer(spec: TensorSpec, shape: Sequence[int]) -> str | None:
    """'This file declares 32x32 ...; free the dims: --free-dims ...' when `shape` has the
    input's rank and positive sizes and differs only where it declares numbers, else None."""
    if len(shape) != len(spec.shape) or min(shape, default=1) <= 0:
        return None
    axes = [
        i
        for i, dim in enumerate(spec.shape)
        if isinstance(dim, int) and dim > 0 and dim != shape[i]
    ]
    if not axes:
        return None
    declared, asked = (
        _sizes([spec.shape[i] for i in axes], axes),
        _sizes([shape[i] for i in axes], axes),
    )
    return (
        f"This file declares {declared} where you ask {asked}; if its graph runs at {asked}, "
        "free the dims: --free-dims on the command line, or 'Free the declared dims' on the "
        "model card (the rewrite must give the file's outputs at its declared sizes and run at "
        "two others before it is used)."
    )


def _sizes(sizes: Sequence[object], axes: list[int]) -> str:
    """'32x32', or with the batch (dim 0) among them 'a batch of 10 and 32x32'."""
    rest = "x".join(map(str, sizes[1:] if axes[0] == 0 else sizes))
    if axes[0] != 0:
        return rest
    return f"a batch of {sizes[0]} and {rest}" if rest else f"a batch of {sizes[0]}"
