"""Refitting a latency profile from a Verify run's own batches: the prediction then rests on how
the model really ran behind the Pipeline, not only on how it ran alone when profiled.

The evidence is the run's batch trace: per batch size s, n_s batches whose runner call took
m_s ms on average, and the mean hand-back time per batch (`trace.handoff_ms`). Each observed
size's slowdown r_s = m_s / latency(s) (the profile's, interpolated) goes to the nearest
measured size b (ties to the smaller), count-weighted: n_b = sum n_s, r_b = sum n_s r_s / n_b.
The profile's own weight at b is w_b: its runs at b (one for a profile without runs), or, for
a profile already refitted, the runs and batches it rested on (`Calibration.weights`), so
successive Verify runs converge instead of the latest one winning. The blend is by count:

    f_b = (w_b * 1 + n_b * r_b) / (w_b + n_b)

and every latency at b (mean, p50, p99, quantiles, runs) is multiplied by f_b, keeping the
measured spread's shape. A measured size no batch came near takes the count-weighted mean of
the others' f_b: a machine that runs slower at batch 1 and 2 runs slower at 8 too, and
leaving 8 alone would bend the curve where the model does not. The hand-back mean (and the
hand-back times the simulator draws from) replace the profile's when the run had them (a batch
waited); they were measured under the load being served. From a run's batch records, each
runner time first loses the idle extra the profile expects after its idle gap (the simulator
adds it back), so a low-rate run, every batch after a gap, does not count it twice; likewise the
profile's served extra per runner call at the rate the run served (`served_extra_at`; the
timer probe's, `timed_extra_ms`, for a run whose batches waited on a timeout).
An open-loop run that kept up also leaves its answers' serving delays (each answer's latency
less its own queue wait and its batch's runner call: the way in and back to the caller, and the
serving threads' stalls) at the rate it served, in `serving_delays_load`; the simulator draws
from them at and around that rate, so Verify runs at several rates build the delays' curve.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeAlias

import numpy as np

from optistudio.core.batching.handoff import serving_delays
from optistudio.core.batching.latency import HANDOFF_GAPS, Calibration, LatencyProfile
from optistudio.core.batching.loadgen import LoadRun
from optistudio.core.batching.results import BatchRecord, LoadResult
from optistudio.core.batching.simulate import IDLE_FLOOR
from optistudio.core.batching.trace import (
    handoff_gaps_ms,
    runner_and_idle_ms,
    runner_summary,
    slowdown_of,
)
from optistudio.core.errors import InvalidSpec

RunnerSummary = Mapping[int, tuple[int, float]]
"""Per batch size (rows): how many batches ran and their mean runner ms."""


class BatchSummary(Protocol):
    """What a stored Verify result keeps of its batches (the job result's `VerifyBatches`)."""

    runner: dict[int, tuple[int, float]]
    handoff_ms: float | None


Trace: TypeAlias = LoadRun | Sequence[BatchRecord] | BatchSummary


def recalibrate(
    profile: LatencyProfile,
    trace: Trace,
    *,
    verify: str = "a Verify run",
    timeout_ms: float = 0.0,
) -> LatencyProfile:
    """The profile refitted from a Verify run's batches (module docstring), marked calibrated
    by `verify` (a name for the run: 'Verify #12'); `timeout_ms` is the run's batching timeout,
    so a gap that held a wait for batch mates is not read as hand-back. Given the run itself
    (a LoadRun of an open loop that kept up), its answers' serving delays join the profile's
    at the rate it served (`serving_delays_load`). Raises InvalidSpec when no batch ran."""
    runner, handoff, gaps = _evidence(profile, trace, timeout_ms / 1000)
    if not runner:
        raise InvalidSpec(
            "This Verify run recorded no batch, so there is nothing to recalibrate from.",
            hint="Verify for longer or at a higher rate, then recalibrate.",
        )
    point = _run_delays(profile, trace) if isinstance(trace, LoadRun) else None
    weights = _weights(profile)
    seen = _observed(profile, runner)
    factors = _factors(profile, seen, weights)
    refitted = profile.scaled_by(factors)
    before = profile.p50_ms or profile.mean_ms
    after = refitted.p50_ms or refitted.mean_ms
    previous = profile.calibration
    calibration = Calibration(
        verify=verify,
        batches=sum(count for count, _ in runner.values()),
        p50_moved={
            b: (a / o - 1) * 100 for b, o, a in zip(profile.batch_sizes, before, after, strict=True)
        },
        handoff_before_ms=profile.handoff_ms,
        handoff_after_ms=handoff if handoff else profile.handoff_ms,
        weights={b: weights[b] + seen.get(b, (0, 1.0))[0] for b in profile.batch_sizes},
        previous=[*previous.previous, previous.verify] if previous else [],
        delays_rate=point[0] if point else None,
    )
    update: dict[str, object] = {
        "calibration": calibration,
        "handoff_ms": calibration.handoff_after_ms,
    }
    if handoff and len(gaps) > 1:
        update["handoff_gaps_ms"] = [round(ms, 4) for ms in gaps[:HANDOFF_GAPS]]
    if point:
        kept = [(r, d) for r, d in profile.serving_delays_load if abs(r / point[0] - 1) > NEAR]
        update["serving_delays_load"] = sorted([*kept, point])
    return refitted.model_copy(update=update)


NEAR = 0.1
"""A Verify's serving delays replace a set measured within this share of its rate."""


def _run_delays(profile: LatencyProfile, run: LoadRun) -> tuple[float, list[float]] | None:
    """(rate req/s, serving delays ms) of `run`'s answers (`handoff.serving_delays`) at the
    rate it served: the simulator then draws, at that rate, the delays the runtime really
    showed there, and a set measured within NEAR of it gives way. None for a closed loop (no
    rate), a saturated run (its delays are the growing queue's) or a profile with no light set
    to mix them with."""
    rate = run.result.realised_rate
    if not rate or run.result.saturated or not profile.serving_delays_ms:
        return None
    if profile.light_rate() is None:  # no rate to place the light set at, so no curve to join
        return None
    delays = serving_delays(run, profile)
    return (float(f"{rate:.4g}"), delays) if delays else None


def _evidence(
    profile: LatencyProfile, trace: Trace, timeout_s: float
) -> tuple[RunnerSummary, float | None, list[float]]:
    """Runner summary, hand-back mean (None or 0: the run had none) and hand-back times of any
    kind of trace. A batch record's runner time loses the extra the profile expects after its
    idle gap (`LatencyProfile.idle_extra`), which the simulator adds back: left in, a run at a
    low rate, every batch after a gap, would fold the idle extra into the speed and count it
    twice. A stored summary has no gaps and is taken as it is."""
    served = profile.served_extra_ms
    if isinstance(trace, LoadRun):  # the extra at the rate it served
        rate = trace.result.realised_rate or trace.result.throughput
        served = profile.served_extra_at(rate, timed=timeout_s > 0)
        trace = trace.batches
    if isinstance(trace, Sequence):
        gaps = handoff_gaps_ms(trace, timeout_s=timeout_s)
        mean = float(np.mean(gaps)) if gaps else None
        by_size = profile.timed_extra_by_size() if timeout_s > 0 else None
        return _runner_without_idle(profile, trace, served, by_size), mean, gaps
    return (
        {
            int(rows): (int(n), max(float(ms) - served, IDLE_FLOOR * float(ms)))
            for rows, (n, ms) in trace.runner.items()
        },
        trace.handoff_ms,
        [],
    )


def served_slowdown(profile: LatencyProfile, run: LoadRun, *, timeout_ms: float = 0.0) -> float:
    """How much slower (> 1) or faster than `profile` the model itself ran in a load run: the
    run's runner time less what the profile expects serving to add to it (the idle extra after
    each batch's idle gap, the served extra at the rate it served, with a batching timeout
    `timeout_ms` each size's timed extra: what the simulator adds, and the refit takes off,
    `_evidence`), over the profile's bare latency for the same batches; 1.0 when no batch ran.
    `overall_slowdown` leaves those costs in, so it reads a model served as profiled as slow
    where they are a large share of a call: on 2 cores (2026-12-07) a 0.08-ms CNN's served
    calls took 1.6-1.7x its bare runs while the machine's own pace read steady, 1.1-1.25x with
    the idle extras alone taken off, and a Verify of PP-OCR's orientation classifier at 15 req/s
    said "the model ran 1.43x slower" of a run that landed inside its band."""
    runner, _, _ = _evidence(profile, run, timeout_ms / 1000)
    return slowdown_of(runner, profile)


def _runner_without_idle(
    profile: LatencyProfile,
    batches: Sequence[BatchRecord],
    served_ms: float,
    by_size: Callable[[int], float] | None = None,
) -> RunnerSummary:
    """`runner_summary` of the batches with each one's expected idle extra and the served extra
    `served_ms` (at least `by_size` of its size, with a timeout) taken off (the simulator adds
    both back)."""
    if not profile.idle_extra_ms and not served_ms and by_size is None:
        return runner_summary(batches)
    times: dict[int, list[float]] = {}
    for rows, spent, idle in runner_and_idle_ms(batches, profile):
        extra = (served_ms if by_size is None else max(served_ms, by_size(rows))) + idle
        times.setdefault(rows, []).append(max(spent - extra, IDLE_FLOOR * spent))
    return {rows: (len(spent), float(np.mean(spent))) for rows, spent in sorted(times.items())}


def _weights(profile: LatencyProfile) -> dict[int, int]:
    """What the profile's latency at each size rests on: earlier refits' weights, else its runs
    (one per size for a profile without runs)."""
    if profile.calibration and profile.calibration.weights:
        return {b: profile.calibration.weights.get(b, 1) for b in profile.batch_sizes}
    counts = {b: 0 for b in profile.batch_sizes}
    for size, _ in profile.runs:
        counts[size] += 1
    return {b: count or 1 for b, count in counts.items()}


def _observed(profile: LatencyProfile, runner: RunnerSummary) -> dict[int, tuple[int, float]]:
    """Per measured size b: the batches assigned to it and their count-weighted slowdown."""
    sums: dict[int, tuple[int, float]] = {}
    for rows, (count, mean_ms) in runner.items():
        if count < 1:
            continue
        nearest = min(profile.batch_sizes, key=lambda b: (abs(b - rows), b))
        total, weighted = sums.get(nearest, (0, 0.0))
        sums[nearest] = (total + count, weighted + count * mean_ms / profile.latency_ms(rows))
    return {b: (count, weighted / count) for b, (count, weighted) in sums.items()}


def _factors(
    profile: LatencyProfile, seen: dict[int, tuple[int, float]], weights: dict[int, int]
) -> dict[int, float]:
    """The latency factor per measured size: the count-weighted blend where batches ran, their
    count-weighted mean elsewhere."""
    factors = {
        b: (weights[b] + count * ratio) / (weights[b] + count) for b, (count, ratio) in seen.items()
    }
    total = sum(count for count, _ in seen.values())
    elsewhere = sum(seen[b][0] * factor for b, factor in factors.items()) / total
    return {b: factors.get(b, elsewhere) for b in profile.batch_sizes}


def saturated_refit(run: LoadResult, refit: LatencyProfile, profile: LatencyProfile) -> str | None:
    """Why a refit from this run is not adopted, or None when it may be.

    A saturated run (arrivals outpaced service, the queue kept growing) measures its runner
    while the load generator, the queue and the serving threads fight for the same cores: on a
    0.02 ms model such a run read +5341 % service time, which would make every prediction at a
    sane rate wrong. Its batches still show what happened at that rate, so the Verify keeps
    them; the profile in use stays as it was."""
    if not run.saturated:
        return None
    moved = max(
        (refit.latency_ms(b) / profile.latency_ms(b) - 1) * 100 for b in profile.batch_sizes
    )
    served = f"served {run.throughput:.1f} req/s"
    if run.realised_rate:
        served += f" of {run.realised_rate:.1f} sent"
    return (
        f"Not recalibrated: this run was saturated ({served}; the queue kept growing), and a "
        f"saturated runner is slowed by the queue's own contention (its refit would have moved "
        f"the service time up to {moved:+.0f} %). Verify at a rate below the knee to "
        "recalibrate."
    )


def calibration_line(profile: LatencyProfile) -> str:
    """How far the last refit moved the p50 service time per batch size, in words ('' when the
    profile was never refitted): 'recalibrated by Verify #12 (340 batches): p50 service time at
    batch 1 moved +20 %, at batch 2 +19 %'."""
    calibration = profile.calibration
    if calibration is None:
        return ""
    moves = ", ".join(f"at batch {b} {moved:+.0f} %" for b, moved in calibration.p50_moved.items())
    earlier = f" (after {', '.join(calibration.previous)})" if calibration.previous else ""
    delays = ""
    if calibration.delays_rate:
        delays = f"; answers' delays at {calibration.delays_rate:g} req/s from that run"
    return (
        f"recalibrated by {calibration.verify}{earlier} from {calibration.batches} batches: "
        f"p50 service time {moves}{delays}"
    )


def recalibrate_at_instances(
    profile: LatencyProfile, trace: Trace, *, instances: int, **kwargs: Any
) -> LatencyProfile:
    """`recalibrate` for a run served by `instances` instances: its batches are judged against
    the profile as one of that many sees it (`at_instances`, its latencies: the refit's serving
    costs are the run's own), and the refit's moves are carried
    back to the one-instance figures, the table of instance slowdowns kept. The other arguments
    as `recalibrate`'s."""
    seen = profile.at_instances(instances, served=False)
    refit = recalibrate(seen, trace, **kwargs)
    if seen is profile:
        return refit
    undo = {
        b: one / many
        for b, one, many in zip(profile.batch_sizes, profile.mean_ms, seen.mean_ms, strict=True)
    }
    return refit.scaled_by(undo).model_copy(update={"instance_latency": profile.instance_latency})
