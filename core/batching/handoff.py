"""The runtime's own cost per batch under load, measured when a model is profiled.

Between two batches of an instance that has requests waiting, the Pipeline hands the results
back (futures resolved, the callers' threads woken) and cuts the next batch; on busy cores that
takes 0.1-1 ms per batch, which a profile of bare runs does not see and which caps throughput
at b / (latency(b) + hand-back). `measure_handoff` runs a short closed loop through the real
Pipeline at the largest profiled batch size, with twice as many clients as rows per batch so a
full batch always waits, and returns the mean gap from the end of one run to the next cut
(`optistudio.core.batching.trace.handoff_gaps_ms`). The simulator adds it to every batch.

The mean, not the median: on busy cores the gaps have a long tail (MiniLM at batch 8, 2 shared
cores, 2-s loops: median 0.3 ms, mean 0.6-1.7 ms, the slowest tenth over 4 ms in two of three
loops), and throughput pays the mean. On digits-cnn a 4-s closed loop's measured throughput was
3 % off the one simulated with the mean, 11 % off the one with the median.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from optistudio.core.backends import LoadedModel
from optistudio.core.batching.applicability import StackAxes
from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.loadgen import LoadRun, run_load
from optistudio.core.batching.pipeline import Pipeline
from optistudio.core.batching.probe_speed import (
    QUICK_REFERENCE_ROUNDS,
    REFERENCE_ROUNDS,
    REFERENCE_SECONDS,
    bracketed,
    speed_beside,
)
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.trace import handoff_gaps_ms, runner_and_idle_ms
from optistudio.core.model.info import TensorSpec

HANDOFF_BATCHES = 40
"""Batches the closed loop sends when they fit in HANDOFF_SECONDS."""
HANDOFF_SECONDS = 2.0
"""Longest the closed loop runs, unless MIN_HANDOFF_BATCHES take longer."""
MIN_HANDOFF_BATCHES = 6


def measure_handoff(
    model: LoadedModel,
    inputs: list[TensorSpec],
    requests: list[dict[str, np.ndarray]],
    *,
    max_batch_size: int,
    batch_ms: float,
    axes: StackAxes | None = None,
) -> float | None:
    """Mean hand-back time (ms) of `model` served at `max_batch_size` under a saturating
    closed loop of one-row `requests` (cycled); `batch_ms` is the profiled latency of a full
    batch, which stretches the run for slow models. None when no two batches ran back to back."""
    gaps = measure_handoff_gaps(
        model, inputs, requests, max_batch_size=max_batch_size, batch_ms=batch_ms, axes=axes
    )
    return float(np.mean(gaps)) if gaps else None


def measure_handoff_gaps(
    model: LoadedModel,
    inputs: list[TensorSpec],
    requests: list[dict[str, np.ndarray]],
    *,
    max_batch_size: int,
    batch_ms: float,
    axes: StackAxes | None = None,
    time_scale: float = 1.0,
) -> list[float]:
    """Every hand-back time (ms) of the closed loop `measure_handoff` averages, in order: their
    spread is what one batch's hand-back may take; `time_scale` as `ServingProbe.time_scale`.
    Empty when no two batches ran back to back."""
    settings = BatchingSettings(max_batch_size=max_batch_size, timeout_ms=0)  # no timeout waits
    seconds = max(HANDOFF_SECONDS * time_scale, MIN_HANDOFF_BATCHES * 1.5 * batch_ms / 1000)
    with Pipeline([model.run], inputs, settings, axes=axes) as pipeline:
        run = run_load(
            pipeline,
            requests,
            process="closed",
            clients=2 * max_batch_size,
            requests=HANDOFF_BATCHES * max_batch_size,
            seconds=seconds,
        )
    return handoff_gaps_ms(run.batches)


REQUEST_PROBE_RATES = (40_000.0, 160_000.0)
"""Send rates (req/s) of the serving machinery's probe, tried in turn until one is faster than
the machinery: the first is well above what it passes on 2 cores (9,900-14,600 req/s with no
model on a Xeon, more the faster it is sent); a faster CPU kept up with it and then gets the
second, at which the sender itself falls behind, which measures the pace too."""
REQUEST_PROBE_SECONDS = 0.25
REQUEST_UNMEASURED = (
    "the serving machinery kept up with every probe rate (up to {rate:,.0f} req/s), so its pace "
    "is above that and could not be measured here; predictions apply no cap for it"
)
HANDOFF_UNMEASURED = (
    "no two batches ran back to back in the saturating closed loop, so the hand-back time "
    "could not be measured here; predictions add none"
)


@dataclass(frozen=True)
class RequestCost:
    """The serving machinery's time per request (`ms`), or why it could not be measured
    (`unmeasured`, one sentence): exactly one of the two is set."""

    ms: float | None
    unmeasured: str | None = None


def measure_request_cost(
    inputs: list[TensorSpec],
    requests: list[dict[str, np.ndarray]],
    *,
    max_batch_size: int,
    axes: StackAxes | None = None,
    seed: int = 11,
) -> RequestCost:
    """The serving machinery's time per request (ms; `LatencyProfile.request_ms`): one over the
    requests per second it passed when a Poisson run sent the model's own one-row `requests`
    through the Pipeline (max batch `max_batch_size`, timeout 0) with a runner that answers at
    once, at each of REQUEST_PROBE_RATES in turn until one outpaced it. What it measures is
    everything but the model: the sender's loop, each request's check and queueing, the
    stacking and the hand-back, sharing one GIL (on 2 shared cores about 14,000 req/s of
    1x3x64x64 requests). A run that kept up with its schedule (sent on time, no growing
    queue) measured only its own rate, never the machinery's pace: when every rate was kept
    up with, or nothing could be served, the result says so instead of giving a number."""
    axes = axes or StackAxes({spec.name: 0 for spec in inputs}, ())
    batched = [(name, axis) for name, axis in axes.inputs.items() if axis is not None]
    if not batched:
        return RequestCost(None, "no input has a batch axis, so no request could be batched")
    name, axis = batched[0]

    def answer(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return [np.zeros((feeds[name].shape[axis], 1), dtype=np.float32)]

    settings = BatchingSettings(max_batch_size=max_batch_size, timeout_ms=0, max_queue=1_000_000)
    for rate in REQUEST_PROBE_RATES:
        with Pipeline([answer], inputs, settings, axes=StackAxes(axes.inputs, ())) as pipeline:
            run = run_load(
                pipeline, requests, process="poisson", rate=rate,
                seconds=REQUEST_PROBE_SECONDS, seed=seed, warmup_share=0.0,
            )  # fmt: skip
        result = run.result
        if result.throughput <= 0:
            return RequestCost(None, "the probe with no model served no request")
        kept_up = not result.saturated and (result.realised_rate or 0) >= 0.95 * rate
        if not kept_up:  # a sender that fell behind measured the pace too
            return RequestCost(1000.0 / result.throughput)
    return RequestCost(None, REQUEST_UNMEASURED.format(rate=REQUEST_PROBE_RATES[-1]))


@dataclass(frozen=True)
class ServedRun:
    """A serving probe's run through the real Pipeline: its settings, Poisson rate and what
    it measured."""

    settings: BatchingSettings
    rate: float
    run: LoadRun
    speed: float = 1.0
    """The machine's speed against the profile while it ran (`probe_speed.bracketed`; > 1
    slower); 1.0 for a probe without bare timings beside it."""


@dataclass(frozen=True)
class ServingProbe:
    """What every serving probe serves and sends: the loaded model behind a Pipeline of max
    batch `max_batch_size` (timeout 0), its inputs and stacking axes, and the one-row
    requests it cycles."""

    model: LoadedModel
    inputs: list[TensorSpec]
    requests: list[dict[str, np.ndarray]]
    max_batch_size: int
    axes: StackAxes | None = None
    feeds: dict[int, dict[str, np.ndarray]] | None = None
    """Batches per profiled size for the bare timings beside each probe
    (optistudio.core.batching.probe_speed); None: the probe takes the machine as profiled."""
    time_scale: float = 1.0
    """How long each probe sends, as a share of its default length (SERVING_PROBE_SECONDS,
    TIMER_PROBE_SECONDS, HANDOFF_SECONDS), and the bare timings beside it (REFERENCE_SECONDS):
    1 for a profile whose figures are used; a sweep that checks what every job does with a
    model, not its figures, takes less."""
    served: list[ServedRun] | None = None
    """Where `serve_at` keeps each run it serves, with its settings and rate, for the profile's
    own check of the simulator against them (optistudio.core.batching.served_checks); None:
    not kept."""
    instances: list[LoadedModel] | None = None
    """The sessions the Pipeline serves through, one per instance (None: `model` alone); the
    bare timings beside a probe time `model`."""

    @property
    def sessions(self) -> list[LoadedModel]:
        """The sessions it serves through: `instances`, or `model` alone."""
        return self.instances or [self.model]


SERVING_PROBE_SHARE = 0.2
"""The light rate the serving probe sends at, as a share of the runtime's ceiling."""
SERVING_PROBE_SECONDS = (2.0, 3.0)
"""Shortest and longest serving probe: long enough for about 150 requests where that fits."""
SERVING_PROBE_REQUESTS = 150
SERVING_DELAYS = 400
"""Most per-request serving delays a profile keeps, evenly spaced over the probe."""


def measure_serving(
    probe: ServingProbe, profile: LatencyProfile, *, seed: int = 7
) -> tuple[float, list[float]]:
    """The runtime's own cost when serving at a light rate: (served extra ms per batch, serving
    delays ms per request), from a short Poisson run through the real Pipeline (max batch
    `probe.max_batch_size`, timeout 0) at SERVING_PROBE_SHARE of `profile`'s ceiling with hand-back.

    Back-to-back runs in one thread are the model's best case. Served, another thread
    submits, the serving thread wakes for each batch, results cross threads and the GIL: on 2
    shared cores a 0.07 ms CNN's runner call took 0.4-0.6 ms served at 300 req/s. The extra per
    batch is the mean of (runner call) - (profiled latency + the idle extra after its gap); the
    delay per request is its measured latency less its own queue wait and its batch's runner
    call (`serving_delays`): the way in, the stacking, and the answer's way back to the caller
    after its batch's run (wake-ups, futures, the GIL), which the simulator adds per request
    while the instance's own hand-back (`handoff_ms`, measured under saturation) holds only the
    instance.
    Returns (0, []) when the probe served no batch."""
    run, _, speed = serve_share(probe, profile, SERVING_PROBE_SHARE, seed=seed)
    if not run.batches:
        return 0.0, []
    return served_extra_of(run, profile, speed), serving_delays(run, profile)


def serving_delays(run: LoadRun, profile: LatencyProfile) -> list[float]:
    """Per request of `run` (at most SERVING_DELAYS, evenly spaced over it), the ms its answer
    took beyond its queue wait and its batch's runner call (`LoadRun.delays_ms`: the way in, the
    stacking, the way back to the caller after the run, and any stall of the serving threads
    that held it), less the profile's `request_ms`, which the simulator spends on every request
    before it joins a queue. Measured per request, so a run whose batches the simulator would
    have cut differently (under load, most of them) adds no error of its own: the delays were
    once the measured latency minus the run's send times and runner calls replayed, and at 80 %
    of the ceiling the replay's other batches read as delays with a median of -0.7 ms and a p99
    of 45 ms on a 3 ms model. Empty when no batch ran."""
    delays = np.asarray(run.delays_ms, dtype=np.float64) - profile.request_ms
    delays = delays[np.isfinite(delays)]
    if not run.batches or not len(delays):
        return []
    kept = np.linspace(0, len(delays) - 1, min(len(delays), SERVING_DELAYS)).round().astype(int)
    return [round(float(ms), 4) for ms in delays[kept]]  # spread over the run


SERVING_LOAD_SHARE = 0.8
"""The heavy rate the second serving probe sends at, as a share of the ceiling the light probe
left (its served extra per call included)."""


KEPT_UP = 0.85
"""Least share of its realised rate a heavy probe must serve for its point to count: a runner
that cannot keep up serves far less (4x slower than profiled: half), while one stall of the
serving threads near a short probe's end, which the Verify's own saturation rule (the last
answer 3 % of the span late) reads as a growing queue, costs a few percent."""


def measure_served_extra_under_load(
    probe: ServingProbe, profile: LatencyProfile, *, seed: int = 8
) -> tuple[float, float, list[float]] | None:
    """(rate req/s, extra ms per runner call, serving delays ms) served at SERVING_LOAD_SHARE
    of `profile`'s ceiling (with the light probe's served extra in it): the second point of
    `LatencyProfile.served_extra_load` and the first of `serving_delays_load`. Under load the
    runner's call takes longer than at a light rate: the serving threads' work grows with the
    request rate and takes the cores and the GIL the runner's return needs (on 2 shared cores
    a 0.4 ms MLP's call took 0.2 ms extra at a fifth of its ceiling, 0.9 ms at half of it);
    and the answers wait longer for the serving threads. None when the probe served no batch,
    or fell behind (served less than KEPT_UP of its realised rate): then the runner shared the
    cores with a queue that only grows, and its batches were as large as they go, so their
    extra says what saturation costs, not what a rate the runtime can serve does (a 10 ms
    PP-OCR classifier served at 80 % of its ceiling under the studio's load read 57 ms extra
    per call, which would have made every prediction saturate). With `probe.instances`, the
    same for that many sessions behind one Pipeline (`InstanceLatency.served_load`), each
    call's extra against the profile at that count (`at_instances`)."""
    run, rate, speed = serve_share(probe, profile, SERVING_LOAD_SHARE, seed=seed)
    served = run.result
    if not run.batches or served.throughput < KEPT_UP * (served.realised_rate or rate):
        return None
    own = profile.at_instances(len(probe.sessions))
    extra = round(served_extra_of(run, own, speed), 4)
    return round(rate, 3), extra, serving_delays(run, own)


SATURATION_SHARE = 1.3
"""The rate the saturation probe sends at, as a share of the ceiling the light and heavy probes
left: above what the runtime serves, so every batch is full and the queue never empties."""
SATURATION_BATCHES = 4
"""Fewest steady full batches the saturation probe must see to time the runtime's pace."""
KEPT_PACE = 0.97
"""A runtime that served at least this share of the pace the profile gives its full batches
keeps that pace: no point."""


def measure_saturation(
    probe: ServingProbe, profile: LatencyProfile, *, seed: int = 9
) -> tuple[float, float] | None:
    """(the rows per second the runtime served with its queue never empty, the extra ms per
    runner call that makes `profile`'s ceiling that pace): the last point of
    `LatencyProfile.served_extra_load`, from a Poisson run sent at SATURATION_SHARE of the
    profile's ceiling with its light and heavy extras in it. The pace is timed on the run's
    steady batches (after its first fifth, while the sender still sent). At the ceiling the
    serving threads stack, hand back and take requests in as fast as they can, and they share
    the cores and the GIL with the runner: on 2 shared cores a 0.1 ms CNN served 7,200-7,900
    rows/s in full batches of 8 where its profile's runs, hand-back and extras made 10,300, so
    a setting at 80 % of that ceiling was past what it serves (p99 1.1 s, predicted 3.9 ms).
    None when the runtime kept KEPT_PACE of the pace the profile gives its full batches, or
    too few steady batches ran; and when the ceiling lies at a smaller batch than the full ones
    (a model slower per row in larger batches: a PP-OCR classifier served 58 rows/s in batches
    of 16 and 111 at batch 1), since an extra per call timed on the largest batches would
    slow the small ones out of all proportion; and when it kept KEPT_PACE of the rate sent
    (no queue grew: its pace is not the runtime's). With `probe.instances`, the same for that many sessions
    behind one Pipeline (`InstanceLatency.saturation`): the pace is theirs together, the
    extra each one's per call, against the profile at that count (`at_instances`)."""
    count = len(probe.sessions)
    run, rate, speed = serve_share(probe, profile, SATURATION_SHARE, seed=seed, max_queue=1_000_000)
    sending = run.sent_ms[-1] / 1000 if run.sent_ms else 0.0
    steady = sorted(
        (b for b in run.batches if 0.2 * sending <= b.run_start and b.run_end <= sending),
        key=lambda batch: batch.run_end,
    )
    if len(steady) < count * SATURATION_BATCHES + 1:
        return None
    span = steady[-1].run_end - steady[0].run_end
    rows = sum(batch.rows for batch in steady[1:])
    pace = rows / span if span > 0 else 0.0
    size = round(rows / (len(steady) - 1))
    if pace >= KEPT_PACE * rate:  # it kept up with its sender: no queue, not its pace
        return None
    top, best = profile.ceiling(probe.max_batch_size, with_handoff=True, instances=count)
    # the batches' own pace by the profile, at the rate served: what the point would correct
    # (at the machine's speed during the probe: a slower spell is not the runtime's cost)
    model_ms = speed * profile.at_instances(count).latency_ms(size)
    own_ms = model_ms + (profile.handoff_ms or 0.0) + profile.served_extra_at(top)
    if pace <= 0 or best < size or pace >= KEPT_PACE * 1000.0 * count * size / own_ms:
        return None
    extra = 1000.0 * count * size / pace - model_ms - (profile.handoff_ms or 0.0)
    return round(pace, 3), round(max(extra, 0.0), 4)


def probe_rate(
    profile: LatencyProfile, max_batch_size: int, share: float, instances: int = 1
) -> float:
    """The rate (req/s) a serving probe sends at: `share` of the profile's ceiling with its
    runtime costs, for `instances` instances, but past one instance of no more than one
    instance's ceiling: they share the serving threads, and a sender far past what those pass
    takes the cores from them and times itself (on 2 cores a 0.2 ms MLP's two instances, sent
    1.3 times their ceiling by the profile, 32,000 req/s, served 5,000 rows/s; sent 14,500,
    12,900)."""
    top = profile.ceiling(max_batch_size, with_handoff=True, instances=instances)[0]
    if instances > 1:
        top = min(top, profile.ceiling(max_batch_size, with_handoff=True)[0])
    return share * top


def serve_share(
    probe: ServingProbe,
    profile: LatencyProfile,
    share: float,
    *,
    seed: int,
    max_queue: int | None = None,
    timeout_ms: float = 0.0,
) -> tuple[LoadRun, float, float]:
    """A short Poisson run of `probe` through the real Pipeline (timeout `timeout_ms`) at
    `share` of `profile`'s ceiling (`probe_rate`), warmed as a Verify is: long enough for
    SERVING_PROBE_REQUESTS where SERVING_PROBE_SECONDS allow; `max_queue` as BatchingSettings
    takes it (its default when None). Returns the run, its rate, and the machine's speed
    against the profile while it ran (bare timings before and after it, `probe_speed`; 1.0
    without `probe.feeds`)."""
    count = len(probe.sessions)
    rate = probe_rate(profile, probe.max_batch_size, share, count)
    settings = BatchingSettings(
        max_batch_size=probe.max_batch_size, timeout_ms=timeout_ms, instances=count
    )
    if max_queue is not None:
        settings = settings.model_copy(update={"max_queue": max_queue})
    low, high = (limit * probe.time_scale for limit in SERVING_PROBE_SECONDS)
    seconds = min(max(SERVING_PROBE_REQUESTS / rate, low), high)
    run, speed = serve_at(probe, profile, settings, rate, seconds, seed=seed)
    return run, rate, speed


def serve_at(
    probe: ServingProbe,
    profile: LatencyProfile,
    settings: BatchingSettings,
    rate: float,
    seconds: float,
    *,
    seed: int,
    warm: int | None = None,
) -> tuple[LoadRun, float]:
    """A Poisson run of `probe` through the real Pipeline with `settings` at `rate` for
    `seconds`, after `warm` requests answered (default: a full batch); returns the run and the
    machine's speed against the profile while it ran (bare timings before and after it,
    `probe_speed`; 1.0 without `probe.feeds`)."""
    before = _speed(probe, profile)
    runners = [model.run for model in probe.sessions]
    with Pipeline(runners, probe.inputs, settings, axes=probe.axes) as pipeline:
        count = settings.max_batch_size if warm is None else warm
        warming = [pipeline.submit(probe.requests[i % len(probe.requests)]) for i in range(count)]
        for future in warming:
            future.result()
        run = run_load(
            pipeline, probe.requests, process="poisson", rate=rate, seconds=seconds, seed=seed,
            warmup_share=0.0,
        )  # fmt: skip
    speed = bracketed(before, _speed(probe, profile))
    if probe.served is not None:
        probe.served.append(ServedRun(settings, rate, run, speed))
    return run, speed


def _speed(probe: ServingProbe, profile: LatencyProfile) -> float:
    """The bare timing beside a probe (`speed_beside`), as long as the probe's `time_scale`
    says, and one round at least in a shortened probe; 1.0 without `probe.feeds`."""
    if not probe.feeds:
        return 1.0
    quick = probe.time_scale < 1
    return speed_beside(
        probe.model,
        probe.feeds,
        profile,
        seconds=REFERENCE_SECONDS * probe.time_scale,
        rounds=QUICK_REFERENCE_ROUNDS if quick else REFERENCE_ROUNDS,
    )


def served_extra_of(run: LoadRun, profile: LatencyProfile, speed: float = 1.0) -> float:
    """The extra ms every runner call of the run paid: the median over its calls of (runner
    time - idle extra - the profile's typical run at that size at the machine's `speed` then,
    `probe_speed`). Typical: the p50 (interpolated between sizes; the mean where the profile
    kept none). Medians, since serving shifts every call while a neighbour's stall hits a few,
    and the stalls the profile saw are replayed by the simulator already: on 2 cores at load
    23 a BERT-style encoder's heavy probe read a 47 ms mean extra on 40-220 ms runs."""
    extras = [extra for _, extra in served_extras(run, profile, speed)]
    return max(float(np.median(extras)), 0.0)


def served_extras(
    run: LoadRun, profile: LatencyProfile, speed: float = 1.0
) -> list[tuple[int, float]]:
    """(rows, the extra ms that call paid) per runner call of the run, in order, taken as
    `served_extra_of` takes its median: runner time - idle extra - the profile's typical run
    at that size (`LatencyProfile.typical_ms`) at the machine's `speed` then."""
    return [
        (rows, spent - idle - speed * profile.typical_ms(rows))
        for rows, spent, idle in runner_and_idle_ms(run.batches, profile)
    ]
