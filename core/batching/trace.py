"""Replaying a measured load run in the simulator, batch by batch, to find where they part.

A load run records the real pipeline's batches (`LoadRun.batches`). `replay` feeds the
simulator the same send times and, in order, the same runner times plus the run's mean hand-back
time (from the end of one run to the cut of the next while requests wait: results handed to
their callers, their threads woken, the next batch cut), so the only thing left to differ is the
batching policy itself: with a faithful simulator the batches come out alike.
`compare` lines the two batch lists up and reports the first batch where they differ, and how
the real runner times compare with the profile's latency at each size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.results import BatchRecord, LoadResult
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.simulate import replay_batches


@dataclass(frozen=True)
class Replay:
    """The simulator's result and batches for a replayed run."""

    result: LoadResult
    batches: list[BatchRecord]


def replay(
    settings: BatchingSettings,
    sent_s: Sequence[float],
    batches: Sequence[BatchRecord],
    *,
    overhead_s: float | None = None,
    warmup_share: float = 0.1,
) -> Replay:
    """Simulate `settings` on the given send times, the k-th batch taking the k-th measured
    batch's time from cut to the end of its run, plus `overhead_s` (default: the run's mean
    hand-back time, `handoff_ms`)."""
    if overhead_s is None:
        overhead_s = handoff_ms(batches) / 1000
    result, simulated = replay_batches(
        settings,
        sent_s,
        [b.run_end - b.cut for b in batches],
        overhead_s=overhead_s,
        warmup_share=warmup_share,
    )
    return Replay(result, simulated)


@dataclass(frozen=True)
class Comparison:
    """Where a measured run's batches and the simulator's part.

    first_difference: index of the first batch whose size differs (None: all alike, as many).
    slowdown: per batch size, mean measured runner time / the profile's latency at that size;
    1.0 means the profile described the run. gap_ms: the run's `handoff_ms`.
    """

    first_difference: int | None
    real_sizes: dict[int, int]
    simulated_sizes: dict[int, int]
    slowdown: dict[int, float]
    gap_ms: float


def compare(
    real: Sequence[BatchRecord], simulated: Sequence[BatchRecord], profile: LatencyProfile
) -> Comparison:
    """Line up measured and simulated batches and measure the runner against the profile."""
    sizes = [(a.rows, b.rows) for a, b in zip(real, simulated, strict=False)]
    first = next((i for i, (a, b) in enumerate(sizes) if a != b), None)
    if first is None and len(real) != len(simulated):
        first = min(len(real), len(simulated))
    return Comparison(
        first_difference=first,
        real_sizes=_histogram(real),
        simulated_sizes=_histogram(simulated),
        slowdown=service_slowdown(real, profile),
        gap_ms=handoff_ms(real),
    )


def runner_summary(batches: Sequence[BatchRecord]) -> dict[int, tuple[int, float]]:
    """Per batch size: how many batches ran and their mean runner time (ms)."""
    times: dict[int, list[float]] = {}
    for batch in batches:
        times.setdefault(batch.rows, []).append((batch.run_end - batch.run_start) * 1000)
    return {rows: (len(spent), float(np.mean(spent))) for rows, spent in sorted(times.items())}


def service_slowdown(batches: Sequence[BatchRecord], profile: LatencyProfile) -> dict[int, float]:
    """Per batch size, the mean measured runner time over the profile's latency at that size."""
    return {
        rows: mean_ms / profile.latency_ms(rows)
        for rows, (_, mean_ms) in runner_summary(batches).items()
    }


def overall_slowdown(batches: Sequence[BatchRecord], profile: LatencyProfile) -> float:
    """Total measured runner time over what the profile predicts for the same batches: how much
    slower (> 1) or faster the model ran during the load run than when it was profiled."""
    return slowdown_of(runner_summary(batches), profile)


def slowdown_of(summary: dict[int, tuple[int, float]], profile: LatencyProfile) -> float:
    """`overall_slowdown` from a `runner_summary` (1.0 when no batch ran)."""
    expected = sum(count * profile.latency_ms(rows) for rows, (count, _) in summary.items())
    spent = sum(count * mean_ms for count, mean_ms in summary.values())
    return spent / expected if expected else 1.0


def runner_and_idle_ms(
    batches: Sequence[BatchRecord], profile: LatencyProfile
) -> list[tuple[int, float, float]]:
    """(rows, runner ms, the idle extra the profile expects after that batch's idle gap on its
    instance; 0 for an instance's first batch) of each batch, in order."""
    ended: dict[int, float] = {}
    rows = []
    for batch in batches:
        idle = 0.0
        if batch.instance in ended:
            idle = profile.idle_extra((batch.run_start - ended[batch.instance]) * 1000)
        ended[batch.instance] = batch.run_end
        rows.append((batch.rows, (batch.run_end - batch.run_start) * 1000, idle))
    return rows


def _histogram(batches: Sequence[BatchRecord]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for batch in batches:
        counts[batch.rows] = counts.get(batch.rows, 0) + 1
    return dict(sorted(counts.items()))


def handoff_ms(batches: Sequence[BatchRecord]) -> float:
    """Mean of `handoff_gaps_ms`: the runtime's own cost per batch under this load (0 when no
    batch waited)."""
    gaps = handoff_gaps_ms(batches)
    return float(np.mean(gaps)) if gaps else 0.0


def handoff_gaps_ms(batches: Sequence[BatchRecord], *, timeout_s: float = 0.0) -> list[float]:
    """Time from the end of a run to the cut of the instance's next batch, for each batch whose
    oldest request was already waiting then, and (with the policy's `timeout_s`) already due:
    otherwise the gap holds the policy's wait for batch mates, not the runtime's cost."""
    return [
        (after.cut - before.run_end) * 1000
        for before, after in zip(batches, batches[1:], strict=False)
        if after.oldest + timeout_s < before.run_end and after.instance == before.instance
    ]
