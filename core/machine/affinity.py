"""Pinning the benchmarking process to chosen CPU cores for the length of a run."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from optistudio.core.errors import InvalidSpec


def available_cores() -> list[int]:
    """The cores this process may run on now (all logical cores where affinity is unsupported)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


@contextmanager
def pinned_to(cores: list[int] | None) -> Iterator[list[int]]:
    """Run the block on `cores` only, then restore the previous affinity.

    Affinity applies to the calling thread and to threads it starts afterwards, so pin *before*
    the runtime creates its thread pool (i.e. before loading the model). None leaves it as is.
    """
    if not cores:
        yield available_cores()
        return
    if not hasattr(os, "sched_setaffinity"):
        raise InvalidSpec("CPU affinity cannot be set on this operating system.")
    previous = os.sched_getaffinity(0)
    unknown = sorted(set(cores) - previous)
    if unknown:
        raise InvalidSpec(
            f"CPU cores {unknown} are not available here. Valid cores: {sorted(previous)}."
        )
    os.sched_setaffinity(0, set(cores))
    try:
        yield sorted(cores)
    finally:
        os.sched_setaffinity(0, previous)
