"""Where a PicoDet-style head's cells sit on the image: each head's grid of rows x columns and
its stride, from the heads' cell counts and, when known, the image's height H and width W.

A head at stride s over an H x W input has ceil(H / s) x ceil(W / s) cells, row-major (a
stride-2 convolution with padding rounds up: PicoDet at 800 x 608 has heads of 100 x 76,
50 x 38, 25 x 19 and 13 x 10 cells). Cell (row, col) is centred at ((col + 0.5) s,
(row + 0.5) s).

- H and W known (the input's declared height and width, or the size fed): a head's stride is
  the power of two s in 2 .. 256 whose grid has its cell count;
- unknown: the finest head (the most cells, A_0) is taken at stride 8 on a grid h x w with
  h w = A_0, and every other head at stride 8 f for the power of two f with
  ceil(h / f) ceil(w / f) = A_i. A square grid that fits wins (a square input); a non-square
  one fits its transpose as well, so it is placed only when H and W are known.
"""

from __future__ import annotations

from math import ceil, isqrt
from typing import NamedTuple

from optistudio.core.errors import DataMismatch

BASE_STRIDE = 8
STRIDES = tuple(2**power for power in range(1, 9))
"""Strides tried when the image size is known: 2 .. 256 pixels."""


class Grid(NamedTuple):
    """One head's cells: `rows` x `cols`, row-major, `stride` pixels apart."""

    rows: int
    cols: int
    stride: float


def head_grids(cells: list[int], image_size: tuple[int, int] | None = None) -> list[Grid]:
    """Each head's grid, in the order of `cells` (module docstring); DataMismatch naming the
    counts when they fit no grid, or fit a non-square one and the image size is unknown."""
    if image_size is not None:
        return [_sized(count, image_size) for count in cells]
    finest = max(cells)
    fitting = [shape for shape in _factor_pairs(finest) if _fits(shape, cells)]
    square = [(h, w) for h, w in fitting if h == w]
    if square:
        return _placed(square[0], cells)
    if not fitting:
        raise DataMismatch(
            f"Heads of {', '.join(map(str, cells))} cells fit no grid at doubling strides: "
            "the cells cannot be placed.",
            hint="Export the model with its decoding, or judge it by output cosine (task none).",
        )
    shown = " or ".join(f"{h} x {w}" for h, w in fitting[:4])
    raise DataMismatch(
        f"A head of {finest} cells is no square grid ({shown} cells fit), and the input's "
        "height and width are not known, so the cells cannot be placed.",
        hint="Give the image input a fixed height and width (--shape), or judge the model by "
        "output cosine (task none).",
    )


def _sized(count: int, image_size: tuple[int, int]) -> Grid:
    height, width = image_size
    for stride in STRIDES:
        rows, cols = ceil(height / stride), ceil(width / stride)
        if rows * cols == count:
            return Grid(rows, cols, float(stride))
    raise DataMismatch(
        f"A head of {count} cells is no grid of a {height} x {width} image at a stride of "
        f"{STRIDES[0]} to {STRIDES[-1]} pixels: the cells cannot be placed.",
        hint="Check the input's height and width, or judge the model by output cosine (task none).",
    )


def _factor_pairs(count: int) -> list[tuple[int, int]]:
    """(h, w) with h w = count, the squarest first, each pair before its transpose."""
    pairs: list[tuple[int, int]] = []
    for low in range(isqrt(count), 0, -1):
        if count % low == 0:
            high = count // low
            pairs += [(low, high)] if low == high else [(high, low), (low, high)]
    return pairs


def _factor(shape: tuple[int, int], count: int) -> int | None:
    """The power of two f (1 .. 256) at which the finest grid `shape` has `count` cells."""
    for factor in (1, *STRIDES):
        if ceil(shape[0] / factor) * ceil(shape[1] / factor) == count:
            return factor
    return None


def _fits(shape: tuple[int, int], cells: list[int]) -> bool:
    return all(_factor(shape, count) is not None for count in cells)


def _placed(shape: tuple[int, int], cells: list[int]) -> list[Grid]:
    grids = []
    for count in cells:
        factor = _factor(shape, count) or 1
        rows, cols = ceil(shape[0] / factor), ceil(shape[1] / factor)
        grids.append(Grid(rows, cols, float(BASE_STRIDE * factor)))
    return grids
