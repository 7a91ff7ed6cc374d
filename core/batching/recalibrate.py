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
leaving 8 alone would bend the curve where the model does not. The hand-back mean replaces the
profile's when the run had one (a batch waited); it was measured under the load being served.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from optistudio.core.batching.latency import Calibration, LatencyProfile
from optistudio.core.batching.loadgen import LoadRun
from optistudio.core.batching.results import BatchRecord
from optistudio.core.batching.trace import handoff_ms, runner_summary
from optistudio.core.errors import InvalidSpec

RunnerSummary = Mapping[int, tuple[int, float]]
"""Per batch size (rows): how many batches ran and their mean runner ms."""


class BatchSummary(Protocol):
    """What a stored Verify result keeps of its batches (the job result's `VerifyBatches`)."""

    runner: dict[int, tuple[int, float]]
    handoff_ms: float | None


Trace = LoadRun | Sequence[BatchRecord] | BatchSummary


def recalibrate(
    profile: LatencyProfile, trace: Trace, *, verify: str = "a Verify run"
) -> LatencyProfile:
    """The profile refitted from a Verify run's batches (module docstring), marked calibrated
    by `verify` (a name for the run: 'Verify #12'). Raises InvalidSpec when no batch ran."""
    runner, handoff = _evidence(trace)
    if not runner:
        raise InvalidSpec(
            "This Verify run recorded no batch, so there is nothing to recalibrate from.",
            hint="Verify for longer or at a higher rate, then recalibrate.",
        )
    weights = _weights(profile)
    seen = _observed(profile, runner)
    factors = _factors(profile, seen, weights)
    refitted = _scaled(profile, factors)
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
    )
    update = {"calibration": calibration, "handoff_ms": calibration.handoff_after_ms}
    return refitted.model_copy(update=update)


def _evidence(trace: Trace) -> tuple[RunnerSummary, float | None]:
    """Runner summary and hand-back mean (None or 0: the run had none) of any kind of trace."""
    if isinstance(trace, LoadRun):
        trace = trace.batches
    if isinstance(trace, Sequence):
        return runner_summary(trace), handoff_ms(trace) or None
    return {
        int(rows): (int(n), float(ms)) for rows, (n, ms) in trace.runner.items()
    }, trace.handoff_ms


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


def _scaled(profile: LatencyProfile, factors: dict[int, float]) -> LatencyProfile:
    """Every latency of the profile at each size times that size's factor."""
    row = [factors[b] for b in profile.batch_sizes]

    def times(values: list[float]) -> list[float]:
        return [ms * f for ms, f in zip(values, row, strict=True)] if values else values

    return profile.model_copy(
        update={
            "mean_ms": times(profile.mean_ms),
            "p50_ms": times(profile.p50_ms),
            "p99_ms": times(profile.p99_ms),
            "quantiles_ms": [
                [ms * f for ms in q] for q, f in zip(profile.quantiles_ms, row, strict=False)
            ],
            "runs": [(size, ms * factors[size]) for size, ms in profile.runs],
        }
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
    return (
        f"recalibrated by {calibration.verify}{earlier} from {calibration.batches} batches: "
        f"p50 service time {moves}"
    )
