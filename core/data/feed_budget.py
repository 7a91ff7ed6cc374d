"""What synthesised inputs will hold, checked before any of them is made.

A user's full shape (the CLI's --shape, a profile's shapes) or a large batch can ask for more
than the machine holds; numpy's answer is a MemoryError traceback ("Unable to allocate 16.0
GiB"). The feeds' bytes, prod(shape) x itemsize summed over the inputs made here, are held
against the same budget as a model's declared tensors (half this machine's memory, or
OPTISTUDIO_MAX_TENSOR_MB), and an allocation the process still cannot make becomes a sentence.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import numpy as np

from optistudio.core.errors import InvalidSpec
from optistudio.core.model.declared_sizes import MAX_TENSOR_MB_ENV, default_tensor_budget

_HINT = (
    "Give smaller shapes (--shape NAME=D1,D2,...) or a smaller batch; "
    f"{MAX_TENSOR_MB_ENV} (in MiB) sets the budget on a machine that has the memory."
)


def feed_bytes(dtype: str, shape: tuple[int, ...]) -> int:
    """prod(shape) x itemsize (1 byte a value for a dtype numpy does not know)."""
    try:
        itemsize = np.dtype(dtype).itemsize
    except TypeError:
        itemsize = 1
    return math.prod(shape) * max(1, itemsize)


def check_feed_budget(
    feeds: Mapping[str, tuple[str, tuple[int, ...]]], budget: int | None = None
) -> None:
    """InvalidSpec when the inputs to make ({name: (dtype, shape)}) would hold more than
    `budget` bytes together (default: default_tensor_budget())."""
    limit = default_tensor_budget() if budget is None else budget
    sizes = {name: feed_bytes(dtype, shape) for name, (dtype, shape) in feeds.items()}
    total = sum(sizes.values())
    if total <= limit:
        return
    largest = sorted(sizes, key=sizes.__getitem__, reverse=True)[:4]
    named = ", ".join(f"{name!r} {_shape(feeds[name][1])} {feeds[name][0]}" for name in largest)
    raise InvalidSpec(
        f"The inputs to generate need {_size(total)} ({named}), over the {_size(limit)} "
        "budget for one run's inputs.",
        hint=_HINT,
    )


@contextmanager
def allocating(name: str, dtype: str, shape: tuple[int, ...]) -> Iterator[None]:
    """Turns a MemoryError while making input `name` into InvalidSpec naming it."""
    try:
        yield
    except MemoryError:
        raise InvalidSpec(
            f"Input {name!r} at shape {_shape(shape)} {dtype} needs "
            f"{_size(feed_bytes(dtype, shape))}, more memory than this process could allocate.",
            hint=_HINT,
        ) from None


def _shape(shape: tuple[int, ...]) -> str:
    text = "x".join(map(str, shape[:8])) + ("x..." if len(shape) > 8 else "")
    return f"[{text[:80]}]"


def _size(size: int) -> str:
    if size >= 1024**5:
        return f"{float(size):.2e} bytes"
    return f"{size / 1024**3:,.2f} GiB" if size >= 1024**3 else f"{size / 1024**2:,.1f} MiB"
