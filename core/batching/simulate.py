"""Discrete-event simulation of the batching policy, driven by a measured latency profile.

The simulated system is the runtime's (`optistudio.core.batching.pipeline`): `settings.instances`
servers, each running batches at the latencies one of that many busy instances was measured at
(`LatencyProfile.at_instances`: with N instances on shared cores each runs slower than one
alone, so c instances of service time D serve c / D_c, not c / D_1). Each arrival goes to the
instance with the fewest rows queued or running (the balancer's choice when instances are
alike), and an idle instance sends a batch when its queue reaches
`settings.dispatch_threshold()` or its oldest request has waited `timeout_ms`, taking
`settings.cut_size(queued)` requests. An instance that went idle before that deadline sleeps
on a timer and is back a drawn `profile.timer_late_ms` after it (one draw per deadline; what
joins meanwhile below the threshold waits with it; service="mean": their mean): the serving
thread's wake-up, which a profile's serving probes at timeout 0 never see and which is most of a
fast model's p99 beyond its timeout. A batch of b rows occupies its instance for
`profile.latency_ms(b)` of work (+ `overhead_ms` per batch, the runtime's own cost, not scaled;
by default the profile's measured hand-back time under load, `profile.handoff_ms`, and with
service="measured" and the profile's hand-back times, `handoff_gaps_ms`, each batch's drawn from
those, scaled to average `handoff_ms`: a rare slow hand-back reaches the tail as it does when
served), plus the idle extra `profile.idle_extra(gap)` when the instance sat idle `gap` ms
before the batch (a profile of back-to-back runs never sees it; a served model at a low rate
starts nearly every batch after one; never taking a batch below IDLE_FLOOR of its time):
  - service="mean": that time, fixed;
  - service="measured" with the profile's run sequence (`profile.runs`, sizes interleaved): the
    machine's speed over time is replayed from it, starting at a seeded offset and wrapping.
    With W(t) the work the profile's runs had done by wall time t (piecewise linear, slope =
    the speed then, W(T) = T over the whole sequence), a batch of work w started at t ends at
    W^-1(W(t) + w): it runs slower while the profile's runs were slow, and a slow spell that
    lasted many runs slows all the batches in it, as on a machine that neighbours load for
    seconds at a time. Independent draws of the same spread would scatter the slow runs and
    predict too short a tail;
  - service="measured" with quantiles only (older profiles): an independent draw per batch
    from the measured latency quantiles at that size (inverse CDF, linear between them).
Served, a batch also takes the runner's extra cost when called by the serving threads
(`profile.served_extra_at(rate)`: measured at a light and a heavy rate when profiled, taken at
the simulated arrivals' rate; a closed loop's at the ceiling), and each request's answer comes a
`profile.serving_delays_at(rate)` draw after its batch ends (wake-ups and hand-back of that one
request, and the stalls of the serving threads that held it: measured at the same light and
heavy rates, mixed by where the simulated rate lies; with service="mean" their mean), not holding the instance; never before its batch's
run ends. For a setting with a batching timeout the timer probe's extra and delays stand for
the light probe's (`timed=True`): its serving thread sleeps on timed waits as such a setting's
does, and its runner calls and answers come out slower than at timeout 0; with service="measured"
each call is drawn from the served calls the timer probes kept and slowed in the replayed
speed's slow spells (`_Simulation.draw_timed_calls`). A closed-loop client sends again when its
batch ends.
Before all that, every request passes the serving machinery (`profile.request_ms`: the load
generator's send, the Pipeline's check and queueing, its share of stacking and hand-back, all
under one GIL), one request at a time in arrival order, and joins its instance's queue when
through; its batching timeout counts from then, as the Pipeline's counts from the submit. It caps
throughput at 1000 / request_ms: the fastest models meet that cap before their batch's.
Arrivals are Poisson (exponential gaps), constant-rate, or a closed loop of N clients that send
again as soon as they get an answer. With max_batch_size = 1 and timeout 0 a single instance is
an M/D/1 queue: mean wait rho * D / (2 (1 - rho)), idle share 1 - rho, which the tests check.

Statistics skip the first `warmup_share` of requests (the empty start is not typical).

The band (`simulate_band`): a prediction is as good as what the profile knows, and a Verify it
is checked against is one finite run. Each of R draws (R = BAND_DRAWS) simulates a run as long
as the Verify (rate x seconds requests, at most BAND_REQUESTS / R) with its own arrival seed and
speed-trace offset, on the profile block-bootstrapped: its run sequence cut into blocks of
BLOCK_RUNS consecutive runs (so slow spells stay whole), as many blocks drawn with replacement
as fill the sequence again, and the mean per batch size recomputed from the draw. The band is
the central `level` share (default 1 %-99 %) of the draws' p50, p99 and throughput, and their
median (`Band.p99_ms`, ...) a headline that always lies inside it. Why that wide: a Verify whose
p99 is exchangeable with the R draws lies between the k-th lowest and the k-th highest of them
with probability (R + 1 - 2k) / (R + 1), so a 5 %-95 % band of 20 draws holds about 86 % of
runs, and "9 of 10 Verify runs inside" then fails one time in three even when the profile is
exactly right; 1 %-99 % of 40 draws holds about 95-97 %. It holds:
the model's own spread at each size (the resampled runs), the hand-back's spread (each draw's
hand-back times resampled with replacement, their mean with them, and each batch's hand-back
drawn from them), the timer's lateness (resampled likewise), and the finite run length (each draw as many Poisson arrivals as the Verify
sends, with its own seed). A draw capped below the Verify's length has a looser p99, so the
band is then wider than the Verify's own spread, never narrower; except where its queue kept
growing, which a longer run grows further: such a draw's p50 and p99 are carried over the
Verify's length (`_grown`). Beyond the draws, the p99
band holds the simulator's own error: a profile replays its serving probes once whole
(optistudio.core.batching.served_checks) and the band of a setting of the same kind (with a
batching timeout or without) stretches from its draws' range to that range times each probe's
measured-over-simulated p99 (`_widened`; `Band.served_error_range` records their range). And
the machine's pace: the
profile keeps how fast the bare model ran beside each of its serving probes against its own
timings (`LatencyProfile.probe_speeds`, optistudio.core.batching.probe_speed: on 2 quiet cores,
2026-12-06, 0.97-1.24x within one profile, while a BERT-style encoder's 8-s Verify runs minutes
later ran at 1.03-1.15x its profile), and each draw runs the model, and the runtime's own costs
with it (the serving threads share its cores: `LatencyProfile.at_pace`), at a pace drawn from
those, their inverses and 1.0 (`LatencyProfile.paces`: the profile's own timings are one moment of that
moving pace, so the machine may run as much faster than them as the probes ran slower;
`Band.paces` records their range). What it does not hold: a machine whose speed moves further
between profile and Verify than it moved during the profile (recalibration's part), and a load
generator that falls behind its schedule (predict at the realised rate for that).
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np

from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.results import Band, BatchRecord, LoadResult, summarize
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.errors import InvalidSpec

Process = Literal["poisson", "constant", "closed"]
BAND_DRAWS = 40
"""Simulated runs behind a band: its 1 % and 99 % points lie within one draw of each end."""
PACE_STREAM = 7
"""The seed stream a band draw's pace comes from, apart from its resampling's."""
BAND_LEVEL = 0.98
"""The share of draws a band spans by default (module docstring: what a Verify then lands in)."""
BAND_REQUESTS = 60_000
"""Most requests simulated for one band, all draws together (about 0.6 s on 2 quiet cores)."""
BAND_MIN_REQUESTS = 200
"""Fewest requests per draw where no run length says how many a Verify sends (a closed loop, or
no `seconds`): a p99 of fewer is little more than the maximum."""
BAND_FEWEST = 10
"""Fewest requests per draw of an open-loop band for a Verify that sends fewer than
BAND_MIN_REQUESTS: as many as it sends, since its own p99 is then little more than its
slowest answer, and a longer draw's p99 varies less than that. Drawn at 200 requests, the
bands of a PP-OCR recognizer's 8-s Verify runs at 7-23 req/s (60-190 requests) were narrower
than the runs: 7 of 48 measured p99s fell below them, 3 below bands drawn as long as the runs
(2026-12-07, docs/BENCHMARKS.md)."""
BLOCK_RUNS = 16
"""Consecutive profile runs kept together when the profile is resampled."""
WARMUP_SHARE = 0.1
"""The first share of a simulated run's requests its statistics skip (the empty start)."""
VERIFY_SECONDS = 10.0
"""The run length a band stands for when none is given: a Verify job's default."""
IDLE_FLOOR = 0.2
"""Least share of its time a batch keeps when an idle spell speeds it up (a measured negative
extra larger than a fast batch's time)."""
_ARRIVE, _DONE, _TIMEOUT, _JOIN = 0, 1, 2, 3


def simulate(
    profile: LatencyProfile,
    settings: BatchingSettings,
    *,
    rate: float | None = None,
    process: Process = "poisson",
    clients: int = 0,
    requests: int = 20_000,
    seed: int = 0,
    overhead_ms: float | None = None,
    warmup_share: float = WARMUP_SHARE,
    service: Literal["mean", "measured"] = "measured",
    arrivals: Sequence[float] | None = None,
) -> LoadResult:
    """Predict throughput, latency percentiles, queue wait and batch sizes for one setting.

    service="measured" only differs from "mean" when the profile carries quantiles.
    `arrivals` (seconds, ascending) replays given send times instead of drawing them, e.g. the
    ones a load generator really achieved. `overhead_ms` is added to every batch; None takes
    the profile's `handoff_ms` (0 for a profile without one). Each of `settings.instances`
    instances runs at the profile's `at_instances` latencies (its measured slowdown with that
    many busy at once; `profile.instances_note` says how a count it did not measure is taken).
    """
    profile = profile.at_instances(settings.instances)
    if arrivals is not None:
        times = np.asarray(arrivals, dtype=np.float64)
    elif process != "closed":
        times = _open_arrivals(process, rate, requests, seed)
    else:
        times = None
    if process == "closed" and clients < 1:
        raise InvalidSpec("A closed loop needs at least one client.")
    from_caller = overhead_ms is not None
    if overhead_ms is None:
        overhead_ms = profile.handoff_ms or 0.0
    sim = _Simulation(profile, settings, overhead_ms / 1000.0)
    load_rate = _load_rate(profile, settings, rate, times)
    timed = settings.timeout_ms > 0  # the timer probe's extra and delays, where measured
    sim.set_extras(profile, load_rate, timed=timed)
    if sim.extra_of is not None and service == "measured":
        spread = profile.timed_extra_spread(settings.max_batch_size)
        sim.draw_timed_calls(profile, spread, np.random.default_rng(seed + 5))
    if service == "measured" and overhead_ms and profile.handoff_gaps_ms and not from_caller:
        sim.draw_handoffs(profile.handoff_gaps_ms, overhead_ms, np.random.default_rng(seed + 2))
    delays = profile.serving_delays_at(load_rate, timed=timed)
    if delays:
        sim.draw_delays(delays, np.random.default_rng(seed + 3), service)
    if profile.timer_late_ms and settings.timeout_ms > 0:
        sim.draw_timer(profile.timer_late_ms, np.random.default_rng(seed + 4), service)
    if service == "measured" and profile.runs:
        sim.speed = _SpeedTrace(profile, np.random.default_rng(seed + 1))
        if sim.timed_calls:
            sim.spells = sim.speed.smoothed(profile, BLOCK_RUNS)
    elif service == "measured" and profile.quantiles_ms:
        sim.draw_service(profile, np.random.default_rng(seed + 1))
    sim.run(times, clients, requests)
    return sim.result(rate if process != "closed" else None, warmup_share)


def _load_rate(
    profile: LatencyProfile,
    settings: BatchingSettings,
    rate: float | None,
    arrivals: np.ndarray | None,
) -> float | None:
    """The request rate the served extra and the serving delays are taken at: the arrivals'
    own (given send times, or the rate they were drawn at), and for a closed loop, which keeps
    the runtime busy, its ceiling. None for a profile whose served extra and serving delays are
    one at every rate (with a timeout or without)."""
    if len(profile.served_extra_load) < 2 and not (
        profile.serving_delays_load or profile.timed_load
    ):
        return None
    if arrivals is not None and len(arrivals) > 1 and arrivals[-1] > arrivals[0]:
        return float((len(arrivals) - 1) / (arrivals[-1] - arrivals[0]))
    if rate:
        return rate
    return profile.ceiling(
        settings.max_batch_size, with_handoff=True, instances=settings.instances
    )[0]


def simulate_speed_moves(
    profile: LatencyProfile, settings: BatchingSettings, *, step: float = 0.05, **kwargs: Any
) -> tuple[LoadResult, LoadResult]:
    """The prediction on a machine `step` slower, and `step` faster, than profiled: the model's
    latencies and the runtime's own costs alike (`LatencyProfile.at_pace`, as the tuner's margin
    and the band's paces take it: the serving threads share the model's cores); the other
    arguments as `simulate`'s. Near a setting's knee a few percent of the machine's speed
    (another load on it, clocks) is most of the tail: then a p99 predicted, or measured once,
    holds only as well as the machine's speed does, and the setting has no headroom."""
    slower = simulate(profile.at_pace(1 + step), settings, **kwargs)
    faster = simulate(profile.at_pace(1 - step), settings, **kwargs)
    return slower, faster


def simulate_band(
    profile: LatencyProfile,
    settings: BatchingSettings,
    *,
    rate: float | None = None,
    process: Process = "poisson",
    clients: int = 0,
    seconds: float | None = VERIFY_SECONDS,
    draws: int = BAND_DRAWS,
    max_requests: int = BAND_REQUESTS,
    level: float = BAND_LEVEL,
    seed: int = 0,
    overhead_ms: float | None = None,
    arrivals: Sequence[float] | None = None,
    served_error: bool = True,
) -> Band:
    """The range of p50, p99 and throughput over `draws` simulated runs as long as a Verify of
    `seconds` (closed loop: the request cap), each on a resampled profile (module docstring).
    With `arrivals` (seconds, ascending: a run's own send times) every draw replays them, so the
    band holds what the profile does not know about the service, not the arrivals' luck; past
    `max_requests` / `draws` of them each draw replays a window of that many consecutive ones
    from a seeded start (a shorter run: a looser band, never a narrower one). With
    `served_error` the p99 band also holds the prediction moved by the simulator's error on the
    profile's own served probes (`_widened`)."""
    if draws < 2 or not 0 < level < 1:
        raise InvalidSpec(f"A band needs at least two draws and a level in (0, 1), got {level}.")
    per_draw = max(BAND_MIN_REQUESTS, max_requests // draws)
    if rate and seconds and process != "closed":
        per_draw = max(BAND_FEWEST, min(per_draw, int(rate * seconds)))
    span_s = seconds if rate and seconds and process != "closed" else None
    if arrivals is not None:
        per_draw = min(len(arrivals), max(BAND_MIN_REQUESTS, max_requests // draws))
        span_s = float(arrivals[-1] - arrivals[0]) if len(arrivals) > 1 else None
    figures = np.array([  # a row per draw: p50, p99, throughput, whether its queue grew
        _band_draw(profile, settings, rate, process, clients, per_draw, seed, i, overhead_ms,
                   arrivals, span_s)
        for i in range(draws)
    ])  # fmt: skip
    low, middle, high = np.percentile(
        figures[:, :3], [50 * (1 - level), 50, 50 * (1 + level)], axis=0
    )
    band = Band(
        p50_ms=float(middle[0]),
        p99_ms=float(middle[1]),
        throughput=float(middle[2]),
        p50_low_ms=float(low[0]),
        p50_high_ms=float(high[0]),
        p99_low_ms=float(low[1]),
        p99_high_ms=float(high[1]),
        throughput_low=float(low[2]),
        throughput_high=float(high[2]),
        level=level,
        draws=draws,
        requests=per_draw,
        seconds=seconds if process != "closed" else None,
        paces=[min(profile.paces()), max(profile.paces())] if profile.paces() else None,
        saturated_share=round(float(figures[:, 3].mean()), 4),
    )
    return _widened(band, profile, settings) if served_error else band


def _widened(band: Band, profile: LatencyProfile, settings: BatchingSettings) -> Band:
    """`band` stretched to hold its p99 moved by each of the simulator's errors on the profile's
    own served probes of the same kind, with a batching timeout or without
    (`LatencyProfile.served_errors`, optistudio.core.batching.served_checks): its bottom times
    the lowest where that is below 1, its top times the highest where that is above 1. Their
    median and range are recorded (`Band.served_error`, `Band.served_error_range`); `band` as
    it is when there is none. Each probe is a served run of the same machinery at another rate,
    so how far the simulator missed them spans how far it may miss a Verify: on the zoo's five
    batchable models (2026-12-07) the probes' errors with a timeout spread 0.95-1.36 within one
    profile, and a median alone held 19-22 of 30 Verify runs where their range would have held
    23-27 of the same runs (docs/BENCHMARKS.md)."""
    errors = profile.served_errors(timed=settings.timeout_ms > 0, instances=settings.instances)
    if not errors:
        return band
    low, high = errors[0], errors[-1]
    return band.model_copy(
        update={
            "p99_low_ms": min(band.p99_low_ms, band.p99_low_ms * low),
            "p99_high_ms": max(band.p99_high_ms, band.p99_high_ms * high),
            "served_error": round(float(np.median(errors)), 4),
            "served_error_range": [round(low, 4), round(high, 4)],
        }
    )


def _band_draw(
    profile: LatencyProfile,
    settings: BatchingSettings,
    rate: float | None,
    process: Process,
    clients: int,
    requests: int,
    seed: int,
    draw: int,
    overhead_ms: float | None,
    arrivals: Sequence[float] | None = None,
    span_s: float | None = None,
) -> tuple[float, float, float, float]:
    """p50, p99, throughput and whether its queue kept growing (1.0 or 0.0) of one draw: its own resampled profile, the model at a pace
    drawn from the profile's (`LatencyProfile.paces`, from a stream of its own: a profile
    without them draws as before) and seeds; a draw whose queue kept growing over fewer
    requests than the run of `span_s` seconds sends has its p50 and p99 grown to that run's
    length (`_grown`)."""
    rng = np.random.default_rng([seed, draw])
    paces = profile.paces()
    pace = float(np.random.default_rng([seed, draw, PACE_STREAM]).choice(paces)) if paces else 1.0
    # as one of its instances sees it first, so that count's own serving sets are drawn too
    drawn = resampled(profile.at_instances(settings.instances), rng, pace=pace)
    if arrivals is not None and len(arrivals) > requests:
        start = int(rng.integers(0, len(arrivals) - requests + 1))
        window = np.asarray(arrivals[start : start + requests], dtype=np.float64)
        arrivals = window - window[0]
    result = simulate(
        drawn, settings, rate=rate, process=process, clients=clients, requests=requests,
        seed=int(rng.integers(2**31)), overhead_ms=overhead_ms, arrivals=arrivals,
    )  # fmt: skip
    p50, p99 = _grown(result, requests, span_s, settings.max_queue)
    return p50, p99, result.throughput, float(result.saturated)


def _grown(
    result: LoadResult, requests: int, span_s: float | None, max_queue: int
) -> tuple[float, float]:
    """The p50 and p99 of a saturated draw of `requests` carried over a run sending for
    `span_s` seconds: a queue that grows waits longer the longer the run. Over the draw its
    queue grew by arrivals over throughput less one request per request served, so a request
    sent t seconds in waits that share of t more than the first; the run's p50 and p99 lie at
    the middle and the 99th point of its measured requests (after `WARMUP_SHARE`), and each
    grows by that share of the time the run sends beyond the draw, up to the wait of a full
    queue (`max_queue` over the throughput) and a run. A draw that kept up, or ran as long, is as
    it is. A band's draws stop at BAND_REQUESTS / BAND_DRAWS requests: for a fast model that
    is half a second of a 10-s Verify, and a draw just past its ceiling held a p99 of 65 ms
    where the Verify it stood for measured 408-435 ms (opset-21 CNN, 2026-12-07)."""
    rate, served = result.realised_rate, result.throughput
    if not result.saturated or not span_s or not rate or served <= 0 or result.rejected:
        return result.p50_ms, result.p99_ms
    drawn_s = requests / rate
    if span_s <= drawn_s:
        return result.p50_ms, result.p99_ms
    growth = max(rate / served - 1.0, 0.0)
    full_ms = 1000.0 * max_queue / served + result.mean_compute_ms  # a full queue, then a run

    def grown(ms: float, point: float) -> float:
        at = WARMUP_SHARE + point * (1 - WARMUP_SHARE)
        return min(ms + growth * at * (span_s - drawn_s) * 1000.0, max(ms, full_ms))

    return grown(result.p50_ms, 0.5), grown(result.p99_ms, 0.99)


def resampled(
    profile: LatencyProfile, rng: np.random.Generator, *, pace: float = 1.0
) -> LatencyProfile:
    """The profile with its run sequence block-bootstrapped (blocks of BLOCK_RUNS consecutive
    runs drawn with replacement) and its means, p50/p99 and quantiles recomputed from the draw;
    a batch size the draw missed keeps its figures. Its hand-back times are drawn with
    replacement too, and `handoff_ms` moves with their mean. With `pace` every time is that
    many times as long, the model's and the runtime's own (`LatencyProfile.at_pace`): the
    machine's pace moves the serving threads on its cores as it moves the model. A profile
    without runs is returned as is (at `pace`)."""
    runs = profile.runs
    if not runs:
        return profile.at_pace(pace) if pace != 1.0 else profile
    block = min(BLOCK_RUNS, len(runs))
    starts = rng.integers(0, len(runs) - block + 1, size=-(-len(runs) // block))
    drawn = [runs[start + k] for start in starts for k in range(block)][: len(runs)]
    if pace != 1.0:
        drawn = [(size, ms * pace) for size, ms in drawn]
    by_size: dict[int, list[float]] = {}
    for size, ms in drawn:
        by_size.setdefault(size, []).append(ms)
    rows = [(by_size.get(size), i) for i, size in enumerate(profile.batch_sizes)]
    quantile_points = (
        np.linspace(0, 100, len(profile.quantiles_ms[0])) if profile.quantiles_ms else None
    )
    update: dict[str, Any] = {
        "runs": drawn,
        "mean_ms": [float(np.mean(r)) if r else profile.mean_ms[i] * pace for r, i in rows],
    }
    for name, percent in (("p50_ms", 50), ("p99_ms", 99)):
        if getattr(profile, name):
            update[name] = [
                float(np.percentile(r, percent)) if r else getattr(profile, name)[i] * pace
                for r, i in rows
            ]
    gaps = profile.handoff_gaps_ms
    if len(gaps) > 1 and profile.handoff_ms:
        drawn_gaps = rng.choice(np.asarray(gaps), len(gaps))
        update["handoff_gaps_ms"] = drawn_gaps.tolist()
        update["handoff_ms"] = profile.handoff_ms * float(drawn_gaps.mean() / np.mean(gaps))
    update |= _resampled_serving(profile, rng)
    if quantile_points is not None:
        update["quantiles_ms"] = [
            np.percentile(r, quantile_points).tolist()
            if r
            else [ms * pace for ms in profile.quantiles_ms[i]]
            for r, i in rows
        ]
    drawn_profile = profile.model_copy(update=update)
    return drawn_profile.runtime_scaled(pace) if pace != 1.0 else drawn_profile


def _resampled_serving(profile: LatencyProfile, rng: np.random.Generator) -> dict[str, Any]:
    """The profile's measured serving sets (answers' delays, the timer probes' delays, calls
    and lateness), each drawn with replacement: `resampled`'s fields for them."""
    update: dict[str, Any] = {}
    delays = profile.serving_delays_ms
    if len(delays) > 1:
        update["serving_delays_ms"] = rng.choice(np.asarray(delays), len(delays)).tolist()
    if profile.serving_delays_load:
        update["serving_delays_load"] = [
            (rate, rng.choice(np.asarray(drawn), len(drawn)).tolist())
            for rate, drawn in profile.serving_delays_load
        ]
    timed = profile.timed_delays_ms
    if len(timed) > 1:
        update["timed_delays_ms"] = rng.choice(np.asarray(timed), len(timed)).tolist()
    if profile.timed_calls:
        calls = profile.timed_calls
        update["timed_calls"] = [calls[i] for i in rng.integers(0, len(calls), len(calls))]
    if profile.timed_load:
        update["timed_load"] = [
            (rate, extra, rng.choice(np.asarray(drawn), len(drawn)).tolist(), batch)
            for rate, extra, drawn, batch in profile.timed_load
        ]
    late = profile.timer_late_ms
    if len(late) > 1:
        update["timer_late_ms"] = rng.choice(np.asarray(late), len(late)).tolist()
    return update


def replay_batches(
    settings: BatchingSettings,
    arrivals: Sequence[float],
    service_s: Sequence[float],
    *,
    overhead_s: float = 0.0,
    warmup_share: float = 0.1,
) -> tuple[LoadResult, list[BatchRecord]]:
    """The policy on given send times (`arrivals`, seconds, ascending), the k-th batch it sends
    taking `service_s[k]` + `overhead_s` seconds; the result and the batches sent. Fed a load
    run's own times, only the batching decisions can differ from the run. Batches past the
    given times take 1 ms per row + `overhead_s` (a faithful replay never gets there)."""
    sim = _replay(settings, arrivals, service_s, overhead_s)
    return sim.result(None, warmup_share), sim.batches


def _replay(
    settings: BatchingSettings,
    arrivals: Sequence[float],
    service_s: Sequence[float],
    overhead_s: float,
) -> _Simulation:
    sim = _Simulation(_UNIT_PROFILE, settings, overhead_s)
    sim.replayed = deque(service_s)
    sim.run(np.asarray(arrivals, dtype=np.float64), 0, 0)
    return sim


_UNIT_PROFILE = LatencyProfile(batch_sizes=[1], mean_ms=[1.0])
"""1 ms per row: the stand-in service of a replay past its given times."""


def _open_arrivals(process: Process, rate: float | None, count: int, seed: int) -> np.ndarray:
    if rate is None or rate <= 0:
        raise InvalidSpec(f"An open-loop arrival rate must be positive, got {rate}.")
    if process == "constant":
        return np.arange(count) / rate
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, count)
    return np.cumsum(gaps) - gaps[0]


class _SpeedTrace:
    """The profile's runs as the machine's speed over time, replayed from a seeded offset;
    `every` > 1 keeps one point in that many runs (the speed of each stretch of `every` runs,
    without the runs' own scatter within it)."""

    def __init__(
        self, profile: LatencyProfile, rng: np.random.Generator, *, every: int = 1
    ) -> None:
        wall, work = profile.speed_timeline()
        if every > 1 and len(wall) > every + 1:
            keep = np.unique(np.r_[np.arange(0, len(wall), every), len(wall) - 1])
            wall, work = wall[keep], work[keep]
        self.wall, self.work = wall.tolist(), work.tolist()
        self.period, self.total = self.wall[-1], self.work[-1]
        self.offset = float(rng.uniform(0, self.period))

    def smoothed(self, profile: LatencyProfile, every: int) -> _SpeedTrace:
        """The same trace at the same offset, one point in `every` runs."""
        trace = _SpeedTrace(profile, np.random.default_rng(0), every=every)
        trace.offset = self.offset
        return trace

    def duration(self, now: float, work: float) -> float:
        """Wall seconds a batch of `work` seconds (at mean speed) started at `now` takes."""
        start = now + self.offset
        cycles, into = divmod(start, self.period)
        done = cycles * self.total + _interp(into, self.wall, self.work) + work
        cycles, rest = divmod(done, self.total)
        return cycles * self.period + _interp(rest, self.work, self.wall) - start


def _interp(x: float, xs: list[float], ys: list[float]) -> float:
    """y at x on the polyline through (xs, ys); xs ascending (np.interp is slow on scalars)."""
    right = min(max(bisect.bisect_right(xs, x), 1), len(xs) - 1)
    x0, x1, y0, y1 = xs[right - 1], xs[right], ys[right - 1], ys[right]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else y1


class _Draws:
    """Values drawn with replacement from a measured set, 4096 at a time (one draw per call
    is slow)."""

    def __init__(self, values: np.ndarray, rng: np.random.Generator) -> None:
        self.values, self.rng = values, rng
        self.drawn: Iterator[float] = iter(())

    def next(self) -> float:
        drawn: float | None = next(self.drawn, None)
        if drawn is None:
            self.drawn = iter(self.rng.choice(self.values, 4096).tolist())
            drawn = next(self.drawn)
        return drawn


class _Simulation:
    def __init__(self, profile: LatencyProfile, settings: BatchingSettings, overhead: float):
        self.settings = settings
        self.threshold = settings.dispatch_threshold()  # read per event: kept, not recomputed
        self.timeout_s = settings.timeout_s
        self.overhead = overhead
        self.work = {
            b: profile.latency_ms(b) / 1000.0 for b in range(1, settings.max_batch_size + 1)
        }
        self.idle_extra = profile.idle_extra_curve() if profile.idle_extra_ms else None
        self.served_extra = profile.served_extra_ms / 1000.0
        self.extra_of: dict[int, float] | None = None
        self.timed_calls: dict[int, tuple[float, _Draws]] = {}
        self.request_s = profile.request_ms / 1000.0
        self.front_free = 0.0
        self.delays: _Draws | None = None
        self.handoffs: _Draws | None = None
        self.timer_late: _Draws | None = None
        self.speed: _SpeedTrace | None = None
        self.spells: _SpeedTrace | None = None
        count = settings.instances
        self.queues: list[deque[int]] = [deque() for _ in range(count)]
        self.busy = [0] * count
        self.free_since: list[float | None] = [None] * count
        self.armed: list[tuple[float, float] | None] = [None] * count
        self.events: list[tuple[float, int, int, int]] = []
        self.sent: list[float] = []
        self.joined: list[float] = []
        self.started: list[float] = []
        self.finished: list[float] = []
        self.batch_of: list[int] = []
        self.batches: list[BatchRecord] = []
        self.replayed: deque[float] | None = None
        self.rejected = 0
        self.waiting = 0
        self._seq = 0

    def draw_service(self, profile: LatencyProfile, rng: np.random.Generator) -> None:
        """Service times drawn from measured quantiles instead of the fixed mean."""
        curves = {
            b: profile.quantile_curve(b) / 1000.0
            for b in range(1, self.settings.max_batch_size + 1)
        }
        self._rng, self._draws = rng, iter(())
        self._curves = curves

    def set_extras(self, profile: LatencyProfile, load_rate: float | None, *, timed: bool) -> None:
        """What serving adds to each runner call at `load_rate` (`served_extra_at`), and with a
        batching timeout (`timed`) per batch size where the profile has the timed probes'
        sizes: the extra grows with the batch, each size at least its own."""
        self.served_extra = profile.served_extra_at(load_rate, timed=timed) / 1000
        by_size = profile.timed_extra_by_size() if timed else None
        if by_size is not None:
            self.extra_of = {
                b: max(by_size(b) / 1000, self.served_extra)
                for b in range(1, self.settings.max_batch_size + 1)
            }

    def draw_timed_calls(
        self, profile: LatencyProfile, spread: dict[int, np.ndarray], rng: np.random.Generator
    ) -> None:
        """A batch of a size in `spread` (`LatencyProfile.timed_extra_spread`) runs as a served
        call with a timeout did: the size's typical run, its extra (`extra_of`) and one
        deviation drawn from the calls measured at that size, in place of a bare run plus the
        extra (the served calls hold the bare runs' own spread already), stretched by the
        machine's slow spells (`spells`: the speed trace one point in BLOCK_RUNS runs, so the
        runs' own scatter is not counted twice). Drawn one by one, the calls alone would
        scatter a spell's slow calls over the run, as the speed trace's docstring says of
        bare runs: on 2 shared cores a 0.5 ms CNN at 70 % of its ceiling served with p99s of
        2.8 and 10 ms in two runs of the same cell, the second's queue built in a 140 ms stretch
        of slower calls."""
        assert self.extra_of is not None
        self.timed_calls = {
            size: (
                (profile.typical_ms(size) + 1000.0 * self.extra_of[size]) / 1000.0,
                _Draws(deviations / 1000.0, rng),
            )
            for size, deviations in spread.items()
        }

    def draw_handoffs(
        self, gaps_ms: Sequence[float], mean_ms: float, rng: np.random.Generator
    ) -> None:
        """Each batch's hand-back drawn from the measured ones, scaled to average `mean_ms`."""
        gaps = np.asarray(gaps_ms, dtype=np.float64)
        total = gaps.mean()
        self.handoffs = _Draws(gaps * (mean_ms / total / 1000.0), rng) if total > 0 else None

    def draw_delays(
        self, delays_ms: Sequence[float], rng: np.random.Generator, service: str
    ) -> None:
        """Each request's answer this long after its batch ends: drawn from the measured
        serving delays, or (service="mean") their mean."""
        delays = np.asarray(delays_ms, dtype=np.float64) / 1000.0
        self.delays = _Draws(np.full(1, delays.mean()) if service == "mean" else delays, rng)

    def draw_timer(self, late_ms: Sequence[float], rng: np.random.Generator, service: str) -> None:
        """Each timeout waited on fires this long after its deadline: drawn from the measured
        lateness of the serving thread's wake-up, or (service="mean") their mean."""
        late = np.asarray(late_ms, dtype=np.float64) / 1000.0
        self.timer_late = _Draws(np.full(1, late.mean()) if service == "mean" else late, rng)

    def delay(self) -> float:
        """One request's serving delay (s), never negative."""
        return 0.0 if self.delays is None else max(self.delays.next(), 0.0)

    def handoff(self) -> float:
        """One batch's hand-back time (s): drawn when measured ones were given, else the mean."""
        return self.overhead if self.handoffs is None else self.handoffs.next()

    def wake(self, instance: int, due: float, now: float) -> float:
        """When the idle `instance`'s serving thread, asleep until its oldest request's deadline
        `due`, is back to cut a batch: `due` plus one lateness drawn for that deadline (its
        timer event pushed then), whatever joins meanwhile below the dispatch threshold; `due`
        itself when it has passed before the thread went to sleep (back from a run)."""
        armed = self.armed[instance]
        if armed is not None and armed[0] == due:
            return armed[1]
        if now >= due - 1e-12:
            return due
        late = 0.0 if self.timer_late is None else max(self.timer_late.next(), 0.0)
        self.armed[instance] = (due, due + late)
        self.push(due + late, _TIMEOUT, instance)
        return due + late

    def service_time(self, size: int, now: float) -> float:
        """The runner's time (s) for a batch of `size` started at `now`, without hand-back."""
        if self.replayed:
            return self.replayed.popleft()
        if self.speed is not None:
            return self.speed.duration(now, self.work[size])
        if not hasattr(self, "_curves"):
            return self.work[size]
        curve = self._curves[size]
        u: float | None = next(self._draws, None)
        if u is None:
            self._draws = iter((self._rng.random(4096) * (len(curve) - 1)).tolist())
            u = next(self._draws)
        low = int(u)
        high = min(low + 1, len(curve) - 1)
        return float(curve[low] + (curve[high] - curve[low]) * (u - low))

    def runner_time(self, size: int, now: float) -> float:
        """The runner's time (s) for a batch of `size` started at `now` with what serving adds,
        before any idle extra: a drawn served call where the size has them, else a bare run
        plus the size's (or the rate's) extra."""
        drawn = self.timed_calls.get(size)
        if drawn is not None:
            centre, deviations = drawn
            call = max(centre + deviations.next(), IDLE_FLOOR * centre)
            return call if self.spells is None else self.spells.duration(now, call)
        served = self.served_extra if self.extra_of is None else self.extra_of[size]
        return self.service_time(size, now) + served

    def push(self, time: float, kind: int, payload: int) -> None:
        self._seq += 1
        heapq.heappush(self.events, (time, self._seq, kind, payload))

    def run(self, arrivals: np.ndarray | None, clients: int, requests: int) -> None:
        if arrivals is not None:
            self.arrivals = arrivals.tolist()
            self.push(self.arrivals[0], _ARRIVE, 0)
        else:
            self.arrivals, self.limit = [], requests
            for _ in range(clients):
                self.push(0.0, _ARRIVE, -1)
        while self.events:
            now, _, kind, payload = heapq.heappop(self.events)
            if kind == _ARRIVE:
                self.arrive(now, payload)
            elif kind == _DONE:
                self.complete(now, payload)
            elif kind == _JOIN:
                self.join(now, payload)
            else:
                self.dispatch(payload, now)

    def arrive(self, now: float, index: int) -> None:
        if index >= 0 and index + 1 < len(self.arrivals):
            self.push(self.arrivals[index + 1], _ARRIVE, index + 1)
        request = len(self.sent)
        self.sent.append(now)
        self.joined.append(now)
        self.started.append(np.nan)
        self.finished.append(np.nan)
        self.batch_of.append(0)
        if self.waiting >= self.settings.max_queue:
            self.rejected += 1
            return
        self.waiting += 1
        if self.request_s:  # through the serving machinery first, one request at a time
            self.front_free = max(now, self.front_free) + self.request_s
            self.push(self.front_free, _JOIN, request)
        else:
            self.join(now, request)

    def join(self, now: float, request: int) -> None:
        """The request joins the batch queue of the instance with the fewest rows ahead."""
        self.joined[request] = now
        queues, busy = self.queues, self.busy
        instance = (
            0
            if len(queues) == 1
            else min(range(len(queues)), key=lambda i: len(queues[i]) + busy[i])
        )
        self.queues[instance].append(request)
        if not self.busy[instance]:
            self.dispatch(instance, now)

    def dispatch(self, instance: int, now: float) -> None:
        queue = self.queues[instance]
        if self.busy[instance] or not queue:
            return
        due = self.joined[queue[0]] + self.timeout_s
        if len(queue) < self.threshold and now < self.wake(instance, due, now) - 1e-12:
            return
        size = self.settings.cut_size(len(queue))
        handoff = self.handoff()
        service = self.runner_time(size, now) + handoff
        idle_since = self.free_since[instance]
        if self.idle_extra is not None and idle_since is not None:
            extra = self.idle_extra((now - idle_since) * 1000) / 1000
            service = max(service + extra, IDLE_FLOOR * service)
        done = now + service
        oldest = self.joined[queue[0]]
        self.batches.append(BatchRecord(instance, size, size, oldest, now, now, done))
        ran_until = done - handoff
        for _ in range(size):
            request = queue.popleft()
            self.started[request] = now
            # measured serving delays stand for the answer's whole way back from the run's end
            # (the instance stays busy for the hand-back, answered or not); without them the
            # answer comes when the hand-back ends, as the profile's hand-back was measured
            self.finished[request] = done if self.delays is None else ran_until + self.delay()
            self.batch_of[request] = size
        self.waiting -= size
        self.busy[instance] = size
        self.push(done, _DONE, instance)

    def complete(self, now: float, instance: int) -> None:
        size = self.busy[instance]
        self.busy[instance] = 0
        self.free_since[instance] = now
        if not self.arrivals:
            for _ in range(size):
                if len(self.sent) < self.limit:
                    self.push(now, _ARRIVE, -1)
        self.dispatch(instance, now)

    def result(self, rate: float | None, warmup_share: float) -> LoadResult:
        return summarize(
            self.sent,
            self.started,
            self.finished,
            self.batch_of,
            rejected=self.rejected,
            rate=rate,
            warmup_share=warmup_share,
        )
