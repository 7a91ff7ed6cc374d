"""The CPU's own pace: how steadily a plain loop runs, where the contention monitor sees nothing.

A hypervisor can run a vCPU at two speeds without reporting steal (a busy sibling thread on the
host, a clock): on the project's 2-core machine, 2026-12-07, a plain Python loop's 0.15-s
windows read 1.00-2.2x within 4 s at 0 % steal, and a model served minutes after its latency
profile ran 1.2-2.2x its profiled time. `read_pace` times a loop (no model, no I/O) over short
windows; `pace_summary` says how far the slowest window fell behind the fastest and what share
of them ran over SLOW_WINDOW times as long. Over six verify-zoo runs (docs/BENCHMARKS.md) the
runs whose machine read steady before and after their model (at most UNSTEADY_SHARE of windows
slow) landed inside their predicted p99 band 56 times in 60; the others 99 in 120.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np

WINDOW_S = 0.15
"""One reading: the median loop time over this long, as the profile's bare timings take it."""
SLOW_WINDOW = 1.25
"""A window that took this many times the fastest one's loop time is slow."""
UNSTEADY_SHARE = 0.05
"""More slow windows than this share: the machine's own pace moved while it was read."""
LOOP_STEPS = 20_000
"""Iterations of one timed loop (about 1 ms on a 2.8-GHz Xeon)."""


def read_pace(seconds: float) -> list[float]:
    """The median seconds of a plain Python loop per WINDOW_S window, over `seconds` (at least
    one window)."""

    def loop() -> int:
        total = 0
        for i in range(LOOP_STEPS):
            total += i * i
        return total

    windows: list[float] = []
    spent: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or not windows:
        start = time.perf_counter()
        loop()
        spent.append(time.perf_counter() - start)
        if sum(spent) >= WINDOW_S:
            windows.append(float(np.median(spent)))
            spent = []
    return windows


def pace_summary(windows: list[float]) -> dict[str, float | int]:
    """`spread`: the slowest window over the fastest; `slow_share`: the share of windows over
    SLOW_WINDOW times the fastest; `windows`: how many were read."""
    if not windows:
        return {"spread": 1.0, "slow_share": 0.0, "windows": 0}
    fastest = min(windows)
    ratios = [window / fastest for window in windows]
    return {
        "spread": round(max(ratios), 3),
        "slow_share": round(float(np.mean([ratio > SLOW_WINDOW for ratio in ratios])), 3),
        "windows": len(ratios),
    }


def unsteady(summary: Mapping[str, Any] | None) -> bool:
    """Whether a `pace_summary` saw the machine's own pace move (more than UNSTEADY_SHARE of
    its windows slow)."""
    return summary is not None and float(summary.get("slow_share", 0.0)) > UNSTEADY_SHARE
