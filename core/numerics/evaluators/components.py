"""Connected components of a binary mask, 8-connected (pixels touching by an edge or a corner).

scipy.ndimage.label does it when scipy is installed (it comes with scikit-learn); otherwise a
union-find over runs: each row's runs of set pixels are nodes, a run joins every run of the row
above that it overlaps or touches diagonally (columns within one), and each run takes its root's
number. Both number the components 1..count in the order their first pixel appears, row by row.
"""

from __future__ import annotations

import numpy as np

EIGHT_CONNECTED = np.ones((3, 3), dtype=bool)


def label_components(mask: np.ndarray) -> tuple[np.ndarray, int]:
    """An int array the shape of `mask` (0 off the mask, 1..count on it) and the count."""
    try:
        from scipy import ndimage
    except ImportError:
        return label_runs(mask)
    labels, count = ndimage.label(mask, structure=EIGHT_CONNECTED)
    return labels.astype(np.int64), int(count)


def label_runs(mask: np.ndarray) -> tuple[np.ndarray, int]:
    """The union-find labelling (see the module docstring), without scipy."""
    runs = _runs(mask)
    parent = list(range(len(runs)))
    by_row: dict[int, list[int]] = {}
    for index, (row, first, last) in enumerate(runs):
        for other in by_row.get(row - 1, []):
            _, other_first, other_last = runs[other]
            if other_first <= last + 1 and first <= other_last + 1:
                _union(parent, index, other)
        by_row.setdefault(row, []).append(index)
        by_row.pop(row - 2, None)
    return _paint(mask.shape, runs, parent)


def _runs(mask: np.ndarray) -> list[tuple[int, int, int]]:
    """(row, first column, last column) of each run of set pixels, row by row."""
    padded = np.zeros((mask.shape[0], mask.shape[1] + 2), dtype=np.int8)
    padded[:, 1:-1] = mask.astype(bool)
    edges = np.diff(padded, axis=1)
    rows, firsts = np.nonzero(edges == 1)
    _, ends = np.nonzero(edges == -1)
    return [
        (int(row), int(first), int(end) - 1)
        for row, first, end in zip(rows, firsts, ends, strict=True)
    ]


def _union(parent: list[int], a: int, b: int) -> None:
    root_a, root_b = _find(parent, a), _find(parent, b)
    if root_a != root_b:
        parent[max(root_a, root_b)] = min(root_a, root_b)


def _find(parent: list[int], node: int) -> int:
    while parent[node] != node:
        parent[node] = parent[parent[node]]
        node = parent[node]
    return node


def _paint(
    shape: tuple[int, ...], runs: list[tuple[int, int, int]], parent: list[int]
) -> tuple[np.ndarray, int]:
    labels = np.zeros(shape, dtype=np.int64)
    numbers: dict[int, int] = {}
    for index, (row, first, last) in enumerate(runs):
        root = _find(parent, index)
        number = numbers.setdefault(root, len(numbers) + 1)
        labels[row, first : last + 1] = number
    return labels, len(numbers)
