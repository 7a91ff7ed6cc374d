"""The machine's speed beside a serving probe: how fast the bare model runs right then.

A serving probe (optistudio.core.batching.handoff) reads the runtime's own cost per runner call
as what a call took beyond the profile's latency: extra = runner - latency(b). That holds only
while the machine runs as fast as when the profile timed it. On shared cores it moves within
seconds: a neighbour that takes a core during the probe slows every call, and the whole
slowdown was read as serving cost (a 40 ms BERT-style encoder on 2 cores at load average 9 read
32 ms "extra" per call at saturation, which the simulator then added to every batch at
moderate rates, predicting 2-3x the p50 a Verify measured).

So each probe is bracketed by a short bare timing of the same model (`speed_beside`): rounds of
one back-to-back run per batch size, before and after the probe, for at least REFERENCE_ROUNDS
rounds and REFERENCE_SECONDS. The speed is s = median over sizes of median(bare run at b) /
p50(b), the profile's own median at that size (medians: one stall in a few runs must not move
it), and the probe's speed is the geometric mean of the two sides, sqrt(s_before * s_after). The
extra then is runner - s * latency(b): what serving adds at the speed the machine had then.
A probe on a machine as fast as its profile reads s = 1 and changes nothing.
"""

from __future__ import annotations

import math
import time

import numpy as np

from optistudio.core.backends import LoadedModel
from optistudio.core.batching.latency import LatencyProfile

REFERENCE_ROUNDS = 3
"""Fewest rounds (one run per batch size) of a bare timing beside a probe."""
QUICK_REFERENCE_ROUNDS = 1
"""Fewest rounds beside a shortened probe (`ServingProbe.time_scale` < 1), whose figures are
not used: the zoo's sweep."""
REFERENCE_SECONDS = 0.15
"""Shortest bare timing beside a probe, each side."""
REFERENCE_MAX_ROUNDS = 40
SPEED_LIMITS = (0.25, 4.0)
"""A speed outside these is a timing gone wrong, not a machine: it is clipped to them."""


def speed_beside(
    model: LoadedModel,
    feeds: dict[int, dict[str, np.ndarray]],
    profile: LatencyProfile,
    *,
    seconds: float = REFERENCE_SECONDS,
    rounds: int = REFERENCE_ROUNDS,
) -> float:
    """How much slower (> 1) or faster than profiled the bare model runs now: rounds of one
    run per batch size of `feeds` (sizes the profile measured), for at least `rounds` rounds
    and `seconds`; the median over sizes of their median over the profile's p50 there."""
    sizes = [size for size in feeds if size in profile.batch_sizes]
    if not sizes:
        return 1.0
    spent: dict[int, list[float]] = {size: [] for size in sizes}
    start, done = time.perf_counter(), 0
    while done < rounds or time.perf_counter() - start < seconds:
        if done >= REFERENCE_MAX_ROUNDS:
            break
        for size in sizes:
            begin = time.perf_counter()
            model.run(feeds[size])
            spent[size].append((time.perf_counter() - begin) * 1000)
        done += 1
    return speed_of(spent, profile)


def speed_of(spent: dict[int, list[float]], profile: LatencyProfile) -> float:
    """The median over sizes of median(runs at b) / the profile's p50 at b (its mean where it
    kept no p50), clipped to SPEED_LIMITS; 1.0 with no runs."""
    typical = profile.p50_ms or profile.mean_ms
    by_size = dict(zip(profile.batch_sizes, typical, strict=True))
    ratios = [float(np.median(runs)) / by_size[size] for size, runs in spent.items() if runs]
    if not ratios:
        return 1.0
    low, high = SPEED_LIMITS
    return min(max(float(np.median(ratios)), low), high)


def bracketed(before: float, after: float) -> float:
    """The speed over a probe timed between two bare timings: their geometric mean."""
    return math.sqrt(before * after)
