"""Where PicoDet-style heads' cells sit: ceil(H / s) x ceil(W / s) grids from the image size,
else the square grid the cell counts fit."""

from __future__ import annotations

import pytest

from optistudio.core.errors import DataMismatch
from optistudio.core.numerics.evaluators.head_grids import Grid, head_grids

PICODET_800_608 = [7600, 1900, 475, 130]


def test_the_image_size_gives_each_head_its_grid_rounding_up() -> None:
    grids = head_grids(PICODET_800_608, (800, 608))

    assert grids == [Grid(100, 76, 8), Grid(50, 38, 16), Grid(25, 19, 32), Grid(13, 10, 64)]


def test_without_the_size_square_grids_are_placed_at_doubling_strides_from_8() -> None:
    grids = head_grids([1600, 400, 100, 25])

    assert grids == [Grid(40, 40, 8), Grid(20, 20, 16), Grid(10, 10, 32), Grid(5, 5, 64)]


@pytest.mark.parametrize(
    ("cells", "size", "message"),
    [
        (PICODET_800_608, None, "7600 cells is no square grid (100 x 76 or 76 x 100 cells fit)"),
        ([7, 3], None, "fit no grid at doubling strides"),
        ([7600, 1900], (640, 640), "7600 cells is no grid of a 640 x 640 image"),
    ],
    ids=["non-square-unknown-size", "no-grid", "size-does-not-fit"],
)
def test_heads_that_cannot_be_placed_are_refused_with_why(
    cells: list[int], size: tuple[int, int] | None, message: str
) -> None:
    with pytest.raises(DataMismatch, match=message.replace("(", r"\(").replace(")", r"\)")):
        head_grids(cells, size)
