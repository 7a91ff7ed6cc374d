"""How late the serving thread wakes when a batching timeout falls due, measured at profiling.

An instance with fewer rows queued than its dispatch threshold sleeps on a timed wait until its
oldest request has waited `timeout_ms`; the batch is cut when the thread is back, not at the
deadline: the operating system's timer slack, the thread's turn on a core and the GIL come
first. The serving probes that measure the runtime's other costs run with timeout 0 and never
wait on a timer, so a profile without this probe predicts every timed batch cut on the dot.
Measured on 2 shared cores (a 0.1-0.3 ms CNN, 2 ms timeout, 350-1,200 req/s): the lateness was
0.12 ms at the median, 1.2-2.9 ms at the 90th percentile and 4.3-7.5 ms at the 99th at load
3-5; a model whose p99 is the timeout plus a small batch misses its band by that tail.

`measure_timer_lateness` serves the model through the real Pipeline at a light Poisson rate
with timeout TIMER_PROBE_MS, so most batches leave by the timer, and keeps, per batch that the
timer cut (`timer_lateness_ms`), how long after its deadline it was cut. The simulator draws one
of them for every deadline it waits on (`LatencyProfile.timer_late_ms`), whatever the timeout:
the lateness is the thread's way back, taken as independent of how long it slept (measured at
2 ms only). The same run gives the runner's extra per call (`served_extra_of`) and each
answer's serving delay (`serving_delays`) with batches that wait on a timer, which the light
serving probe (timeout 0) does not see: on 2 shared cores a 0.1 ms model's runner call took
0.2-0.4 ms more than profiled at timeout 2 ms, 0.03-0.1 ms at timeout 0, at the same rates and
idle gaps, and its answers' delays were 0.09 ms at the median against 0.01. The simulator takes
them for every setting with a timeout (`LatencyProfile.timed_extra_ms`, `timed_delays_ms`). A thread woken by a request's notify instead (a batch that fills) is not late by
this much: at load 18 a notify's wake-up read 0.05 / 0.21 ms at p50 / p99 against the timer's
0.11 / 11.8 (docs/BENCHMARKS.md), so the simulator still cuts such a batch at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from optistudio.core.batching.handoff import (
    KEPT_UP,
    ServingProbe,
    probe_rate,
    serve_at,
    serve_share,
    served_extra_of,
    served_extras,
    serving_delays,
)
from optistudio.core.batching.latency import TIMED_CALLS_KEPT, LatencyProfile
from optistudio.core.batching.loadgen import LoadRun
from optistudio.core.batching.results import BatchRecord
from optistudio.core.batching.settings import BatchingSettings

TIMER_PROBE_MS = 2.0
"""The timeout the probe serves with (the Batching page's default)."""
TIMER_PROBE_ROWS = 0.6
"""Rows the probe's rate sends per timeout on average: a batch rarely fills before its timer."""
TIMER_PROBE_SHARE = 0.3
"""Most of the runtime's ceiling the probe sends at (a slow model's light rate)."""
TIMER_PROBE_SECONDS = (1.0, 2.0)
"""Shortest and longest probe: long enough for TIMER_PROBE_REQUESTS where that fits."""
TIMER_PROBE_REQUESTS = 600
"""Requests the probe sends where TIMER_PROBE_SECONDS allow: 250-350 timed batches."""
TIMER_LATE_KEPT = 400
"""Most lateness values a profile keeps, evenly spaced over the probe."""
TIMED_LOAD_SHARES = (0.3, 0.6)
"""The rates the timed heavier probes send at, as shares of the runtime's ceiling: batches
that grow and fill before their timeout, as at the rates a Verify checks (30-70 %)."""
TIMED_APART = 1.2
"""Least ratio of a timed heavier probe's rate to the one below it (the light timer probe's):
a model whose ceiling is under 1,000 req/s has its light probe at 30 % already, where a second
run would measure the same point again."""


@dataclass(frozen=True)
class TimedServing:
    """What the timer probe measured: the lateness (ms) of each batch the timer cut, and, with
    batches waiting on the timer, the runner's extra per call (ms; None when no batch ran) and
    each answer's serving delay (ms), at `rate` req/s."""

    rate: float
    late_ms: list[float] = field(default_factory=list)
    extra_ms: float | None = None
    delays_ms: list[float] = field(default_factory=list)
    batch: float | None = None
    """Mean rows per batch of the run (None when no batch ran)."""
    calls: list[tuple[int, float]] = field(default_factory=list)
    """(rows, the runner's extra ms) of its calls (`kept_calls`)."""

    def fields(self) -> dict[str, object]:
        """The profile's fields this probe sets."""
        measured = self.extra_ms is not None or bool(self.delays_ms)
        return {
            "timer_late_ms": self.late_ms,
            "timed_rate": float(f"{self.rate:.4g}") if measured else None,
            "timed_extra_ms": None if self.extra_ms is None else round(self.extra_ms, 4),
            "timed_delays_ms": self.delays_ms,
            "timed_batch": None if self.batch is None else round(self.batch, 3),
            "timed_calls": self.calls if measured else [],
        }


def timer_lateness_ms(
    batches: Sequence[BatchRecord], timeout_s: float, threshold: int
) -> list[float]:
    """Per batch the timer cut, in order: ms from its deadline (oldest arrival + `timeout_s`)
    to its cut. A batch counts when it held fewer than `threshold` rows (it did not fill) and
    its instance's previous run had ended before its oldest request arrived, so the thread was
    waiting on the timer, not running (a batch cut after a busy spell waited for the run)."""
    late: list[float] = []
    last_end: dict[int, float] = {}
    for batch in batches:
        before = last_end.get(batch.instance, float("-inf"))
        if batch.rows < threshold and before <= batch.oldest:
            late.append(max((batch.cut - batch.oldest - timeout_s) * 1000, 0.0))
        last_end[batch.instance] = batch.run_end
    return late


def probe_rate_for_timer(profile: LatencyProfile, max_batch_size: int) -> float:
    """The probe's rate (req/s): TIMER_PROBE_ROWS per timeout, at most TIMER_PROBE_SHARE of the
    runtime's ceiling."""
    top = profile.ceiling(max_batch_size, with_handoff=True)[0]
    return min(TIMER_PROBE_ROWS * 1000.0 / TIMER_PROBE_MS, TIMER_PROBE_SHARE * top)


def measure_timer_lateness(
    probe: ServingProbe, profile: LatencyProfile, *, seed: int = 12
) -> TimedServing:
    """A short Poisson run of the model through the Pipeline (max batch
    `probe.max_batch_size`, timeout TIMER_PROBE_MS) at `probe_rate_for_timer`: the lateness
    (ms) of every batch the timer cut, at most TIMER_LATE_KEPT, evenly spaced; the runner's
    extra per call against `profile` at the machine's speed then (bare timings before and
    after, as the serving probes take them); each answer's serving delay. Nothing measured at
    max batch 1 (every request fills its batch: no timer is waited on); no lateness when no
    batch left by the timer."""
    rate = probe_rate_for_timer(profile, probe.max_batch_size)
    if probe.max_batch_size < 2:
        return TimedServing(rate)
    settings = BatchingSettings(max_batch_size=probe.max_batch_size, timeout_ms=TIMER_PROBE_MS)
    low, high = (limit * probe.time_scale for limit in TIMER_PROBE_SECONDS)
    seconds = min(max(TIMER_PROBE_REQUESTS / rate, low), high)
    run, speed = serve_at(probe, profile, settings, rate, seconds, seed=seed, warm=2)
    late = timer_lateness_ms(run.batches, settings.timeout_s, settings.dispatch_threshold())
    kept = np.linspace(0, len(late) - 1, min(len(late), TIMER_LATE_KEPT)).round().astype(int)
    return TimedServing(
        rate,
        late_ms=[round(late[i], 4) for i in kept] if late else [],
        extra_ms=served_extra_of(run, profile, speed) if run.batches else None,
        delays_ms=serving_delays(run, profile),
        batch=mean_rows(run) if run.batches else None,
        calls=kept_calls(run, profile, speed),
    )


def kept_calls(run: LoadRun, profile: LatencyProfile, speed: float) -> list[tuple[int, float]]:
    """(rows, extra ms) of the run's runner calls (`served_extras`), at most TIMED_CALLS_KEPT,
    evenly spaced over the run."""
    calls = served_extras(run, profile, speed)
    kept = np.linspace(0, len(calls) - 1, min(len(calls), TIMED_CALLS_KEPT)).round().astype(int)
    return [(calls[i][0], round(calls[i][1], 4)) for i in kept] if calls else []


def mean_rows(run: LoadRun) -> float:
    """Mean rows per batch of a run with batches: the sizes its extra per call (a median over
    its batches) was taken at."""
    return float(np.mean([batch.rows for batch in run.batches]))


def measure_timed_under_load(
    probe: ServingProbe, profile: LatencyProfile, above: float, *, seed: int = 13
) -> list[tuple[tuple[float, float, list[float], float], list[tuple[int, float]]]]:
    """Per share of TIMED_LOAD_SHARES of `profile`'s ceiling, served with timeout
    TIMER_PROBE_MS: (rate req/s, the runner's extra ms per call, serving delays ms, mean rows
    per batch), a point of `LatencyProfile.timed_load`, and beside it the run's calls
    (`kept_calls`) for `timed_calls`. With batches that wait on a timer the runner's extra grows
    with the batch (on 2 shared cores a 0.1 ms CNN: 0.08 ms per call in the light timer probe's
    batches of 1-2, 0.13-0.18 ms in batches of 7-8 at 30 % of its ceiling), so a light point
    alone under-predicts the rates a Verify checks. Nothing at max batch 1; a share is left out
    when no batch ran or the probe fell behind (served less than KEPT_UP of its realised rate,
    as the heavy serving probe's rule), and so are the shares above it; a share whose rate is
    not TIMED_APART times the point below it (`above`, the light timer probe's rate, req/s, at
    first) is not run."""
    if probe.max_batch_size < 2:
        return []
    measured: list[tuple[tuple[float, float, list[float], float], list[tuple[int, float]]]] = []
    for index, share in enumerate(TIMED_LOAD_SHARES):
        if probe_rate(profile, probe.max_batch_size, share) < TIMED_APART * above:
            continue
        run, rate, speed = serve_share(
            probe, profile, share, seed=seed + index, timeout_ms=TIMER_PROBE_MS
        )
        served = run.result
        if not run.batches or served.throughput < KEPT_UP * (served.realised_rate or rate):
            break
        extra = round(served_extra_of(run, profile, speed), 4)
        point = round(rate, 3), extra, serving_delays(run, profile), round(mean_rows(run), 3)
        measured.append((point, kept_calls(run, profile, speed)))
        above = rate
    return measured
