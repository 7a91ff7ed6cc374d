"""On one thread when the machine is busy: how a run's variants are timed beside other work.

A comparison at every core beside a neighbour's load measures the load as much as the models:
a pool thread that shares a core with the neighbour holds up every run of a multi-thread model,
and OpenVINO, which pins its threads to cores, loses more to that than ONNX Runtime (measured
on 2 cores beside a load average of 4-16: OpenVINO FP32 0.51-0.79x of ONNX Runtime at both
cores, 0.92-1.19x at one thread, on the same models minutes apart; docs/BENCHMARKS.md "Issue 41").
So when a short idle probe finds other processes using the machine
(optistudio.core.measure.resolve.machine_busy, the contention thresholds of
optistudio.core.machine.contention) and the user set no threads, every variant of the run is
timed on one thread, as the anchors users compare against are, and the run's note says so and
why. A quiet machine, or threads the user set, changes nothing.
"""

from __future__ import annotations

from typing import NamedTuple

from optistudio.core.measure.resolve import machine_busy
from optistudio.core.optimize.spec import OptimizeSpec


class Steady(NamedTuple):
    """The spec the variants are timed with, and why it runs on one thread ('' when not)."""

    spec: OptimizeSpec
    busy: str


def steady_timing(spec: OptimizeSpec) -> Steady:
    """`spec` timed on one thread when the machine is busy and its threads are the default;
    see the module docstring."""
    if spec.comparison.threads is not None or not spec.one_thread_when_busy:
        return Steady(spec, "")
    busy = machine_busy()
    if not busy:
        return Steady(spec, "")
    comparison = spec.comparison.model_copy(update={"threads": 1})
    return Steady(spec.model_copy(update={"comparison": comparison}), busy)


def steady_note(busy: str) -> list[str]:
    """The run's note when its variants were timed on one thread; none otherwise."""
    if not busy:
        return []
    return [
        f"Every variant was timed on one thread: {busy} as the timing began, and a one-thread "
        "comparison holds still beside such load where one on every core does not. The "
        "speedups are one thread's; set the threads to time at more."
    ]
