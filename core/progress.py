"""Progress reporting: the callback every long step takes, and how a step's share is scaled.

A callback gets a fraction of the step done (0..1) and a message for people. A step made of
sub-steps hands each one `scaled(progress, start, end)`: the sub-step reports 0..1 of its own
work and the parent sees start + (end - start) * fraction. A callback may raise
`optistudio.core.errors.Cancelled` to stop the work.
"""

from __future__ import annotations

from collections.abc import Callable

ProgressCallback = Callable[[float, str], None]


def ignore_progress(fraction: float, message: str) -> None:
    """A callback that reports nothing: the default where no one listens."""


def scaled(
    progress: ProgressCallback, start: float, end: float, *, prefix: str = ""
) -> ProgressCallback:
    """`progress` seen from a sub-step that covers start..end of the parent's range; `prefix`
    (e.g. "trial 2: ") goes before each of the sub-step's messages."""

    def report(fraction: float, message: str) -> None:
        progress(start + (end - start) * fraction, prefix + message)

    return report
