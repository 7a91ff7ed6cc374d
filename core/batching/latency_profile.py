"""Measuring a model's latency per batch size on a backend (a `LatencyProfile`, see
optistudio.core.batching.latency): the input of the batching simulator.

The batch sizes are timed on synthetic inputs after a warm-up of each, interleaved: rounds of
one run per size in a seeded random order, until every size has `min_runs` runs and the rounds
took `min_seconds` per size. Interleaving matters on a machine whose speed moves (neighbours,
clocks): timed in blocks, one size would catch a slow minute and another a quiet one, and the
curve would bend where the model does not. The profile keeps the mean per size (what throughput
depends on), the p50/p99, the percentiles 0, 1, ..., 100 (`quantiles_ms`), and every run in the
order it ran (`runs`): the simulator replays that sequence as the machine's speed over time
(see optistudio.core.batching.simulate), so slow spells that last many runs reach the predicted tail.
Between measured sizes latency is interpolated linearly; past the largest it is extrapolated
along the last segment's slope. After the timing, a short closed loop through the real Pipeline
at the largest size measures the runtime's own cost per batch under load (`handoff_ms`, see
optistudio.core.batching.handoff), which the simulator adds to every batch; a half-second run
far above its pace through a runner that answers at once measures the serving machinery's time
per request (`request_ms`), which every simulated request passes in turn; last, a short
Poisson run at a light rate through it measures what serving costs beyond the bare runs: an
extra per runner call (`served_extra_ms`) and a delay per request (`serving_delays_ms`), a
second at a heavy rate the extra per call under load (`served_extra_load`), and a third sent
faster than the runtime serves the pace it keeps with its queue never empty (the last point of
`served_extra_load`, where that pace is below what the profile gives those full batches and the
ceiling lies at the largest batch). The
environment record adds the share of CPU time the hypervisor stole and the cores other processes
used meanwhile (`steal_share`, `other_cores`): a profile taken while a neighbour VM took 30 % of
the cores describes a slower machine than the one served later, or a faster one.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from optistudio.core.backends import LoadedModel, SessionOptions, get_backend
from optistudio.core.batching.applicability import one_row_axes, stack_axes
from optistudio.core.batching.fixed_batch import Batchable, BatchRefused, batchable
from optistudio.core.batching.handoff import (
    HANDOFF_UNMEASURED,
    SERVING_PROBE_SHARE,
    ServingProbe,
    measure_handoff_gaps,
    measure_request_cost,
    measure_saturation,
    measure_served_extra_under_load,
    measure_serving,
    probe_rate,
)
from optistudio.core.batching.instances import instance_counts, measure_instances
from optistudio.core.batching.latency import HANDOFF_GAPS, QUANTILE_COUNT, LatencyProfile
from optistudio.core.batching.settings import serving_options, with_serving_threads
from optistudio.core.data.model_inputs import ModelInputs
from optistudio.core.machine.contention import ContentionMonitor
from optistudio.core.machine.environment import fingerprint
from optistudio.core.model.intake import inspect_model
from optistudio.core.progress import ProgressCallback

QUANTILES = np.linspace(0, 100, QUANTILE_COUNT)
MAX_RUNS = 5000
PROGRESS_EVERY_S = 0.5
HANDOFF_REQUESTS = 8
"""Distinct one-row requests cycled by the hand-back closed loop."""
IDLE_GAPS_MS = (1.0, 20.0, 200.0)
"""Idle gaps a run of the smallest size is timed after (`idle_extras`)."""
IDLE_TRIALS = 6
"""Paired runs per idle gap."""


def default_batch_sizes(max_batch_size: int) -> list[int]:
    """1, 2, 4, ... up to max_batch_size, with max_batch_size itself."""
    sizes, size = [], 1
    while size < max_batch_size:
        sizes.append(size)
        size *= 2
    return [*sizes, max_batch_size]


def measure_latency_profile(
    model_path: Path,
    *,
    max_batch_size: int,
    backend: str = "onnxruntime",
    options: SessionOptions | None = None,
    inputs: ModelInputs | None = None,
    batch_sizes: list[int] | None = None,
    min_runs: int = 10,
    min_seconds: float = 0.3,
    progress: ProgressCallback | None = None,
    instances: list[int] | None = None,
) -> LatencyProfile:
    """Time the model at each batch size (default: powers of two up to max_batch_size), with
    the session options it will be served with (default: `serving_options`; options without
    threads get `serving_threads`, as the Pipeline gives them). `inputs` describe one request
    (`ModelInputs.requests`); their `batch_axes` move an input's batch axis (a state
    [layers, batch, hidden]: 1). Then, for each count
    of `instances` past 1 (default `instance_counts()`: 1, 2, 4, ... up to the cores), that
    many sessions with their share of the threads time the sizes at once
    (`instance_latency`, optistudio.core.batching.instances). A batch fixed at 1 whose rewrite
    is refused is timed at batch 1 only, as it is (`batch_refused` says why).

    Raises InvalidSpec when requests cannot stack (`stack_axes`); `progress` may raise
    optistudio.core.errors.Cancelled to stop.
    """
    refused = ""
    inputs = inputs or ModelInputs()
    try:
        freed = batchable(model_path, inputs)
    except BatchRefused as exc:
        freed, refused, batch_sizes = Batchable(model_path), exc.message, [1]
    model_path = freed.path
    info = inspect_model(model_path)
    axes = one_row_axes(info) if refused else stack_axes(info, inputs.batch_axes)
    sizes = sorted(set(batch_sizes or default_batch_sizes(max_batch_size)))
    given = options or serving_options()
    options = with_serving_threads(given)
    arrays = inputs.arrays(info.inputs)
    model = get_backend(backend).load(model_path, options)
    monitor = ContentionMonitor()
    monitor.start()
    try:
        feeds = {size: inputs.requests(info.inputs, size, arrays=arrays) for size in sizes}
        runs = interleaved_runs(
            model, feeds, min_runs=min_runs, min_seconds=min_seconds * len(sizes),
            progress=progress,
        )  # fmt: skip
        rows = [[ms for size, ms in runs if size == wanted] for wanted in sizes]
        counts = instance_counts() if instances is None else instances
        if progress and len(counts) > 1:
            progress(0.85, f"batch sizes on {counts[1:]} instances running at once")
        table = measure_instances(
            model_path, backend, given, feeds, [float(np.mean(r)) for r in rows],
            counts=counts, min_runs=min_runs, min_seconds=min_seconds * len(sizes),
        )  # fmt: skip
        if progress:
            progress(0.9, f"batch 1 after idle gaps of {', '.join(map(str, IDLE_GAPS_MS))} ms")
        idle = idle_extras(model, feeds[sizes[0]])
        if progress:
            progress(0.93, f"hand-back time per batch under load at batch {sizes[-1]}")
        requests = [
            inputs.requests(info.inputs, 1, arrays=arrays, seed=seed)
            for seed in range(HANDOFF_REQUESTS)
        ]
        gaps = measure_handoff_gaps(
            model, info.inputs, requests, max_batch_size=sizes[-1],
            batch_ms=float(np.mean(rows[-1])), axes=axes,
        )  # fmt: skip
        if progress:
            progress(0.95, "the serving machinery's time per request, with no model")
        request = measure_request_cost(info.inputs, requests, max_batch_size=sizes[-1], axes=axes)
        unmeasured = {"handoff_ms": HANDOFF_UNMEASURED} if not gaps else {}
        if request.unmeasured:
            unmeasured["request_ms"] = request.unmeasured
        profile = LatencyProfile(
            batch_sizes=sizes,
            mean_ms=[float(np.mean(r)) for r in rows],
            p50_ms=[float(np.percentile(r, 50)) for r in rows],
            p99_ms=[float(np.percentile(r, 99)) for r in rows],
            quantiles_ms=[np.percentile(r, QUANTILES).tolist() for r in rows],
            runs=runs,
            handoff_ms=float(np.mean(gaps)) if gaps else None,
            handoff_gaps_ms=[round(ms, 4) for ms in gaps[:HANDOFF_GAPS]],
            idle_extra_ms=idle,
            request_ms=round(request.ms, 5) if request.ms else 0.0,
            unmeasured=unmeasured,
            batched_rewrite=freed.note,
            batch_refused=refused,
            instance_latency=table,
            backend=backend,
            environment=fingerprint(threads=options.threads),
        )
        if progress:
            progress(0.97, "the runtime's own cost per batch and per request at a light rate")
        light = probe_rate(profile, sizes[-1], SERVING_PROBE_SHARE)
        probe = ServingProbe(model, info.inputs, requests, sizes[-1], axes)
        extra, delays = measure_serving(probe, profile)
        profile = profile.model_copy(
            update={
                "served_extra_ms": round(extra, 4),
                "serving_delays_ms": delays,
                "serving_delays_rate": float(f"{light:.4g}") if delays else None,
                "unmeasured": profile.unmeasured | ({} if delays else SERVING_UNMEASURED),
            }
        )
        if progress:
            progress(0.99, "the runner's extra cost per call under a heavy rate")
        heavy = measure_served_extra_under_load(probe, profile)
        if heavy is not None and heavy[0] > light:
            heavy_rate, heavy_extra, heavy_delays = heavy
            load = [(round(light, 3), round(extra, 4)), (heavy_rate, heavy_extra)]
            update: dict[str, object] = {"served_extra_load": load}
            if delays and heavy_delays:
                update["serving_delays_load"] = [(heavy_rate, heavy_delays)]
            profile = profile.model_copy(update=update)
        if progress:
            progress(0.995, "the pace the runtime serves at with its queue never empty")
        profile = with_saturation(profile, measure_saturation(probe, profile))
    finally:
        model.close()
    machine = monitor.stop()
    environment = {
        **profile.environment,
        "steal_share": machine.steal_share,
        "other_cores": round(machine.other_cores, 3),
    }
    return profile.model_copy(update={"environment": environment})


SERVING_UNMEASURED = {
    "served_extra_ms": "the light serving probe served no batch, so the runtime's extra cost "
    "per batch and per answer could not be measured here; predictions add none"
}


def with_saturation(profile: LatencyProfile, point: tuple[float, float] | None) -> LatencyProfile:
    """`profile` with the saturation probe's point (pace, extra) last in `served_extra_load`.
    A heavy point at or above that pace goes (its probe sent faster than the runtime serves
    and only just kept up); a profile with no heavy point gets the light one before it, so the
    extra grows between the two. Nothing changes when the point's extra is no larger than
    the last point's (the profile already predicts that pace) or there is no light rate."""
    light = profile.light_rate()
    if point is None or light is None or point[0] <= light:
        return profile
    load = [(rate, extra) for rate, extra in profile.served_extra_load if rate < point[0]]
    load = load or [(round(light, 3), profile.served_extra_ms)]
    if point[1] <= load[-1][1]:
        return profile
    return profile.model_copy(update={"served_extra_load": [*load, point]})


def idle_extras(
    model: LoadedModel,
    feed: dict[str, np.ndarray],
    *,
    gaps_ms: tuple[float, ...] = IDLE_GAPS_MS,
    trials: int = IDLE_TRIALS,
    seed: int = 0,
) -> list[tuple[float, float]]:
    """Per idle gap, the median over `trials` pairs of (a run after sleeping the gap) - (the
    run just before the sleep, itself right after another run): how much an idle spell slows
    (or, on a loaded machine, speeds) the next run. Pairs cancel the machine's slow drift;
    the gaps are interleaved in a seeded order so a slow spell hits them alike. Profiles are
    run back to back, so a served model that idles between requests runs as they never did:
    on a 2-core shared machine a 0.2 ms CNN took 0.3 ms longer after 20 ms idle."""
    order = [gap for gap in gaps_ms for _ in range(trials)]
    np.random.default_rng(seed).shuffle(order)
    extras: dict[float, list[float]] = {gap: [] for gap in gaps_ms}
    model.run(feed)
    for gap in order:
        begin = time.perf_counter()
        model.run(feed)
        back_to_back = time.perf_counter() - begin
        time.sleep(gap / 1000)
        begin = time.perf_counter()
        model.run(feed)
        extras[gap].append((time.perf_counter() - begin - back_to_back) * 1000)
    return [(gap, round(float(np.median(extras[gap])), 4)) for gap in gaps_ms]


def interleaved_runs(
    model: LoadedModel,
    feeds: dict[int, dict[str, np.ndarray]],
    *,
    min_runs: int,
    min_seconds: float,
    progress: ProgressCallback | None = None,
    seed: int = 0,
) -> list[tuple[int, float]]:
    """(batch size, ms) of each run, in the order run: three warm-up runs per size, then rounds
    of one run per size in a seeded random order until each has `min_runs` and `min_seconds`
    have passed (at most MAX_RUNS runs)."""
    for size_feeds in feeds.values():
        for _ in range(3):
            model.run(size_feeds)
    order, rng = list(feeds), np.random.default_rng(seed)
    runs: list[tuple[int, float]] = []
    start = reported = time.perf_counter()
    rounds = 0
    while rounds < min_runs or time.perf_counter() - start < min_seconds:
        if len(runs) + len(order) > MAX_RUNS:
            break
        for index in rng.permutation(len(order)):
            begin = time.perf_counter()
            model.run(feeds[order[index]])
            runs.append((order[index], (time.perf_counter() - begin) * 1000))
        rounds += 1
        if progress and time.perf_counter() - reported > PROGRESS_EVERY_S:
            reported = time.perf_counter()
            share = min(1.0, (reported - start) / min_seconds) if min_seconds else 1.0
            progress(share, f"timing batch sizes {order} interleaved: round {rounds}")
    return runs
