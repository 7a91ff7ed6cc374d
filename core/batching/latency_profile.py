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
ceiling lies at the largest batch); last, a light run with a batching timeout measures how late
the serving thread wakes when a timeout falls due (`timer_late_ms`,
optistudio.core.batching.timer_wake), and what the runner call and the answers cost with
batches that wait on a timer, at a light rate and at one where they fill (`timed_extra_ms`,
`timed_delays_ms`, `timed_load`). Then the whole profile replays each of those serving runs
that kept up on its own send times (`served_checks`, optistudio.core.batching.served_checks):
the simulator's error on this model, which the bands then hold; and it keeps the machine's
speed over each probe (`probe_speeds`): how far the pace moved within seconds, which the bands
hold too. The
environment record adds the share of CPU time the hypervisor stole and the cores other processes
used meanwhile (`steal_share`, `other_cores`): a profile taken while a neighbour VM took 30 % of
the cores describes a slower machine than the one served later, or a faster one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from optistudio.core.backends import LoadedModel, SessionOptions, get_backend
from optistudio.core.backends.target import RunTarget
from optistudio.core.batching.applicability import StackAxes, one_row_axes, stack_axes
from optistudio.core.batching.fixed_batch import Batchable, BatchRefused, batchable
from optistudio.core.batching.handoff import (
    HANDOFF_UNMEASURED,
    SERVING_PROBE_SHARE,
    ServedRun,
    ServingProbe,
    measure_handoff_gaps,
    measure_request_cost,
    measure_saturation,
    measure_served_extra_under_load,
    measure_serving,
    probe_rate,
)
from optistudio.core.batching.instances import (
    InstanceLatency,
    instance_counts,
    measure_instances,
)
from optistudio.core.batching.latency import HANDOFF_GAPS, QUANTILE_COUNT, LatencyProfile
from optistudio.core.batching.served_checks import served_checks
from optistudio.core.batching.settings import serving_target, with_serving_threads
from optistudio.core.batching.timer_wake import measure_timed_under_load, measure_timer_lateness
from optistudio.core.data.model_inputs import ModelInputs
from optistudio.core.machine.contention import ContentionMonitor
from optistudio.core.machine.environment import fingerprint
from optistudio.core.machine.pace import pace_summary, read_pace
from optistudio.core.model.info import ModelInfo
from optistudio.core.model.intake import inspect_model
from optistudio.core.progress import ProgressCallback, scaled

QUANTILES = np.linspace(0, 100, QUANTILE_COUNT)
MAX_RUNS = 5000
PROGRESS_EVERY_S = 0.5
HANDOFF_REQUESTS = 8
"""Distinct one-row requests cycled by the hand-back closed loop."""
IDLE_GAPS_MS = (1.0, 20.0, 200.0)
"""Idle gaps a run of the smallest size is timed after (`idle_extras`)."""
IDLE_TRIALS = 6
"""Paired runs per idle gap."""
QUICK_IDLE_TRIALS = 3
"""Paired runs per idle gap in a profile with shortened probes (`probe_time_scale` < 1)."""
NOISE_ERRORS = 2.0
"""Standard errors an idle extra must stand from 0 to count (`beyond_noise`)."""
PACE_SECONDS = 1.5
"""How long the machine's own pace is read before the probes and again after them
(optistudio.core.machine.pace; `LatencyProfile.pace_note`)."""
QUICK_PACE_SHARE = 0.3
"""The least share of PACE_SECONDS a quick profile reads (a few windows each side)."""
_NO_PROFILE = LatencyProfile(batch_sizes=[1], mean_ms=[1.0])
"""`Probing.profile` until the timing steps have made the real one."""


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
    target: RunTarget | None = None,
    inputs: ModelInputs | None = None,
    batch_sizes: list[int] | None = None,
    min_runs: int = 10,
    min_seconds: float = 0.3,
    progress: ProgressCallback | None = None,
    instances: list[int] | None = None,
    info: ModelInfo | None = None,
    probe_time_scale: float = 1.0,
) -> LatencyProfile:
    """Time the model at each batch size (default: powers of two up to max_batch_size) on
    `target`, as it will be served (`serving_target`: ONNX Runtime with `serving_options` when
    None; a target without threads gets `serving_threads`, as the Pipeline gives them). `inputs` describe one request
    (`ModelInputs.requests`); their `batch_axes` move an input's batch axis (a state
    [layers, batch, hidden]: 1). Then, for each count
    of `instances` past 1 (default `instance_counts()`: 1, 2, 4, ... up to the cores), that
    many sessions with their share of the threads time the sizes at once
    (`instance_latency`, optistudio.core.batching.instances). A batch fixed at 1 whose rewrite
    is refused is timed at batch 1 only, as it is (`batch_refused` says why). The probes run
    in the order of PROBE_STEPS, each reporting its share of the progress. `info` is the
    model's card when the caller has read it (a worker, from the stored row): the file is then
    not inspected again (a rewrite with a free batch is, being another file).
    `probe_time_scale` shortens (< 1) every serving probe and the bare timings beside it
    (`ServingProbe.time_scale`), and pairs each idle gap QUICK_IDLE_TRIALS times: for a
    caller that checks what the profile does with a model, not its figures (the zoo's sweep).
    Before the probes and after them the machine's own pace is read (PACE_SECONDS each, a
    plain loop: `environment["machine_pace"]`, `LatencyProfile.pace_note`).

    Raises InvalidSpec when requests cannot stack (`stack_axes`); `progress` may raise
    optistudio.core.errors.Cancelled to stop.
    """
    backend, given = serving_target(target)
    probing = _prepare(
        model_path, backend, given, inputs or ModelInputs(), batch_sizes, max_batch_size, info
    )
    probing.min_runs, probing.min_seconds = min_runs, min_seconds * len(probing.sizes)
    probing.instances, probing.time_scale = instances, probe_time_scale
    return _watched(probing, progress)


def _watched(probing: Probing, progress: ProgressCallback | None) -> LatencyProfile:
    """The probe steps run under the contention monitor, the machine's own pace read before
    and after them; the profile with what both saw in its environment."""
    pace_seconds = PACE_SECONDS * min(1.0, max(probing.time_scale, QUICK_PACE_SHARE))
    monitor = ContentionMonitor()
    monitor.start()
    paces = read_pace(pace_seconds)
    try:
        run_probe_steps(probing, progress)
    finally:
        probing.model.close()
    paces += read_pace(pace_seconds)
    machine = monitor.stop()
    profile = probing.profile
    environment = {
        **profile.environment,
        "steal_share": machine.steal_share,
        "other_cores": round(machine.other_cores, 3),
        "machine_pace": pace_summary(paces),
    }
    return profile.model_copy(
        update={"environment": environment, "probe_time_scale": probing.time_scale}
    )


@dataclass
class Probing:
    """What the probe steps share: the model loaded as it will be served, its requests, and
    what the steps measured so far (`fields`, then `profile` once the timing is whole)."""

    model: LoadedModel
    path: Path
    backend: str
    given: SessionOptions
    info: ModelInfo
    axes: StackAxes
    sizes: list[int]
    feeds: dict[int, dict[str, np.ndarray]]
    requests: list[dict[str, np.ndarray]]
    fields: dict[str, Any]
    min_runs: int = 10
    min_seconds: float = 0.3
    instances: list[int] | None = None
    time_scale: float = 1.0
    profile: LatencyProfile = field(default_factory=lambda: _NO_PROFILE)
    light: float = 0.0
    """The light serving probe's rate (req/s), once it ran."""
    served: list[ServedRun] = field(default_factory=list)
    """Every serving probe's run, for the profile's check of the simulator against them."""

    @property
    def max_batch_size(self) -> int:
        """The largest batch timed: the probes' Pipeline serves at most this many rows."""
        return self.sizes[-1]

    def probe(self) -> ServingProbe:
        """The serving probes' Pipeline setup: max batch the largest size, timeout 0."""
        return ServingProbe(
            self.model, self.info.inputs, self.requests, self.max_batch_size, self.axes, self.feeds,
            self.time_scale, self.served,
        )  # fmt: skip


def _prepare(
    model_path: Path,
    backend: str,
    given: SessionOptions,
    inputs: ModelInputs,
    batch_sizes: list[int] | None,
    max_batch_size: int,
    card: ModelInfo | None = None,
) -> Probing:
    """The model freed of a fixed batch where it can be (else timed at batch 1, saying why),
    inspected once (`card`, when given, is the model's), loaded with the serving threads, and
    its feeds per size and requests."""
    refused = ""
    try:
        freed = batchable(model_path, inputs, info=card)
    except BatchRefused as exc:
        freed, refused, batch_sizes = Batchable(model_path), exc.message, [1]
    info = card if card is not None and freed.path == model_path else inspect_model(freed.path)
    axes = one_row_axes(info) if refused else stack_axes(info, inputs.batch_axes)
    sizes = sorted(set(batch_sizes or default_batch_sizes(max_batch_size)))
    options = with_serving_threads(given)
    arrays = inputs.arrays(info.inputs)
    requests = [
        inputs.requests(info.inputs, 1, arrays=arrays, seed=seed)
        for seed in range(HANDOFF_REQUESTS)
    ]
    model = get_backend(backend).load(freed.path, options)
    return Probing(
        model=model, path=freed.path, backend=backend, given=given, info=info, axes=axes,
        sizes=sizes, requests=requests,
        feeds={size: inputs.requests(info.inputs, size, arrays=arrays) for size in sizes},
        fields={
            "batched_rewrite": freed.note, "batch_refused": refused, "backend": backend,
            "environment": fingerprint(threads=options.threads),
        },
    )  # fmt: skip


@dataclass(frozen=True)
class ProbeStep:
    """One probe of the profile: its share of the progress, what it says when it starts
    ('' to say nothing), and the measurement, which adds to `Probing`."""

    name: str
    share: float
    message: Callable[[Probing], str]
    measure: Callable[[Probing, ProgressCallback | None], None]


def run_probe_steps(probing: Probing, progress: ProgressCallback | None) -> None:
    """Every step of PROBE_STEPS in order, each seeing the progress scaled to its share."""
    done = 0.0
    for step in PROBE_STEPS:
        message = step.message(probing)
        if progress and message:
            progress(done, message)
        scoped = scaled(progress, done, done + step.share) if progress else None
        step.measure(probing, scoped)
        done += step.share


def _time_sizes(probing: Probing, progress: ProgressCallback | None) -> None:
    runs = interleaved_runs(
        probing.model, probing.feeds, min_runs=probing.min_runs,
        min_seconds=probing.min_seconds, progress=progress,
    )  # fmt: skip
    rows = [[ms for size, ms in runs if size == wanted] for wanted in probing.sizes]
    probing.fields |= {
        "batch_sizes": probing.sizes,
        "runs": runs,
        "mean_ms": [float(np.mean(r)) for r in rows],
        "p50_ms": [float(np.percentile(r, 50)) for r in rows],
        "p99_ms": [float(np.percentile(r, 99)) for r in rows],
        "quantiles_ms": [np.percentile(r, QUANTILES).tolist() for r in rows],
    }


def _counts(probing: Probing) -> list[int]:
    return instance_counts() if probing.instances is None else probing.instances


def _instances_message(probing: Probing) -> str:
    counts = _counts(probing)
    return f"batch sizes on {counts[1:]} instances running at once" if len(counts) > 1 else ""


def _time_instances(probing: Probing, progress: ProgressCallback | None) -> None:
    probing.fields["instance_latency"] = measure_instances(
        probing.path, probing.backend, probing.given, probing.feeds, probing.fields["mean_ms"],
        counts=_counts(probing), min_runs=probing.min_runs, min_seconds=probing.min_seconds,
    )  # fmt: skip


def _time_idle(probing: Probing, progress: ProgressCallback | None) -> None:
    trials = IDLE_TRIALS if probing.time_scale >= 1 else QUICK_IDLE_TRIALS
    feed = probing.feeds[probing.sizes[0]]
    probing.fields["idle_extra_ms"] = idle_extras(probing.model, feed, trials=trials)


def _time_handoff(probing: Probing, progress: ProgressCallback | None) -> None:
    gaps = measure_handoff_gaps(
        probing.model, probing.info.inputs, probing.requests, max_batch_size=probing.max_batch_size,
        batch_ms=probing.fields["mean_ms"][-1], axes=probing.axes, time_scale=probing.time_scale,
    )  # fmt: skip
    probing.fields |= {
        "handoff_ms": float(np.mean(gaps)) if gaps else None,
        "handoff_gaps_ms": [round(ms, 4) for ms in gaps[:HANDOFF_GAPS]],
        "unmeasured": {} if gaps else {"handoff_ms": HANDOFF_UNMEASURED},
    }


def _time_requests(probing: Probing, progress: ProgressCallback | None) -> None:
    """The serving machinery's time per request; the profile is whole after it."""
    request = measure_request_cost(
        probing.info.inputs,
        probing.requests,
        max_batch_size=probing.max_batch_size,
        axes=probing.axes,
    )
    unmeasured = probing.fields["unmeasured"]
    if request.unmeasured:
        unmeasured["request_ms"] = request.unmeasured
    probing.fields["request_ms"] = round(request.ms, 5) if request.ms else 0.0
    probing.profile = LatencyProfile(**probing.fields)


def _serve_light(probing: Probing, progress: ProgressCallback | None) -> None:
    profile = probing.profile
    light = probing.light = probe_rate(profile, probing.max_batch_size, SERVING_PROBE_SHARE)
    extra, delays = measure_serving(probing.probe(), profile)
    probing.profile = profile.model_copy(
        update={
            "served_extra_ms": round(extra, 4),
            "serving_delays_ms": delays,
            "serving_delays_rate": float(f"{light:.4g}") if delays else None,
            "unmeasured": profile.unmeasured | ({} if delays else SERVING_UNMEASURED),
        }
    )


def _serve_heavy(probing: Probing, progress: ProgressCallback | None) -> None:
    profile = probing.profile
    light = probing.light
    heavy = measure_served_extra_under_load(probing.probe(), profile)
    if heavy is None or heavy[0] <= light:
        return
    heavy_rate, heavy_extra, heavy_delays = heavy
    load = [(round(light, 3), round(profile.served_extra_ms, 4)), (heavy_rate, heavy_extra)]
    update: dict[str, object] = {"served_extra_load": load}
    if profile.serving_delays_ms and heavy_delays:
        update["serving_delays_load"] = [(heavy_rate, heavy_delays)]
    probing.profile = profile.model_copy(update=update)


def _serve_saturated(probing: Probing, progress: ProgressCallback | None) -> None:
    probing.profile = probing.profile.with_saturation(
        measure_saturation(probing.probe(), probing.profile)
    )


def _serve_instances(probing: Probing, progress: ProgressCallback | None) -> None:
    """Each measured instance count served as a setting with that many instances is: its
    sessions at once behind one Pipeline, at the heavy probe's share of their ceiling
    (`InstanceLatency.served_load`, `serving_delays_ms`) and past it (`saturation`)."""
    rows = probing.profile.instance_latency
    probing.profile = probing.profile.model_copy(
        update={"instance_latency": [_served(probing, row) for row in rows]}
    )


def _served(probing: Probing, row: InstanceLatency) -> InstanceLatency:
    served = with_serving_threads(probing.given, row.instances)
    backend = get_backend(probing.backend)
    sessions = [backend.load(probing.path, served) for _ in range(row.instances)]
    try:
        probe = replace(probing.probe(), instances=sessions)
        heavy = measure_served_extra_under_load(probe, probing.profile)
        update: dict[str, object] = {"saturation": measure_saturation(probe, probing.profile)}
        if heavy is not None:
            update |= {"served_load": heavy[:2], "serving_delays_ms": heavy[2]}
        return row.model_copy(update=update)
    finally:
        for session in sessions:
            session.close()


def _time_timer(probing: Probing, progress: ProgressCallback | None) -> None:
    probe = probing.probe()
    timed = measure_timer_lateness(probe, probing.profile)
    probing.profile = probing.profile.model_copy(update=timed.fields())
    profile = probing.profile
    if profile.timed_rate is None:  # the light probe measured nothing: no point to go above
        return
    heavier = measure_timed_under_load(probe, profile, profile.timed_rate)
    calls = [*profile.timed_calls, *(call for _, point_calls in heavier for call in point_calls)]
    update = {"timed_load": [point for point, _ in heavier], "timed_calls": calls}
    probing.profile = profile.model_copy(update=update)


def _check_served(probing: Probing, progress: ProgressCallback | None) -> None:
    """The whole profile replays each serving probe that kept up (`served_checks`), and keeps
    the machine's speed over every probe (`probe_speeds`)."""
    checks = served_checks(probing.profile, probing.served)
    speeds = [round(served.speed, 4) for served in probing.served]
    probing.profile = probing.profile.model_copy(
        update={"served_checks": checks, "probe_speeds": speeds}
    )


def _said(text: str) -> Callable[[Probing], str]:
    return lambda probing: text


PROBE_STEPS: tuple[ProbeStep, ...] = (
    ProbeStep("batch sizes", 0.83, _said(""), _time_sizes),
    ProbeStep("instances", 0.05, _instances_message, _time_instances),
    ProbeStep(
        "idle gaps",
        0.03,
        _said(f"batch 1 after idle gaps of {', '.join(map(str, IDLE_GAPS_MS))} ms"),
        _time_idle,
    ),  # fmt: skip
    ProbeStep(
        "hand-back",
        0.02,
        lambda probing: f"hand-back time per batch under load at batch {probing.max_batch_size}",
        _time_handoff,
    ),  # fmt: skip
    ProbeStep(
        "request cost",
        0.02,
        _said("the serving machinery's time per request, with no model"),
        _time_requests,
    ),  # fmt: skip
    ProbeStep(
        "light serving",
        0.02,
        _said("the runtime's own cost per batch and per request at a light rate"),
        _serve_light,
    ),  # fmt: skip
    ProbeStep(
        "heavy serving",
        0.005,
        _said("the runner's extra cost per call under a heavy rate"),
        _serve_heavy,
    ),  # fmt: skip
    ProbeStep(
        "saturation",
        0.005,
        _said("the pace the runtime serves at with its queue never empty"),
        _serve_saturated,
    ),  # fmt: skip
    ProbeStep(
        "instances served",
        0.005,
        lambda probing: (
            f"{probing.profile.instance_counts()[1:]} instances served at a heavy rate and "
            "with their queue never empty"
            if probing.profile.instance_latency
            else ""
        ),
        _serve_instances,
    ),  # fmt: skip
    ProbeStep(
        "timer wake-up",
        0.01,
        _said(
            "how late the serving thread wakes when a batching timeout falls due, and what "
            "serving with a timeout costs at a light and a heavy rate"
        ),
        _time_timer,
    ),  # fmt: skip
    ProbeStep(
        "served checks",
        0.005,
        _said("the simulator against each serving probe, on the probe's own send times"),
        _check_served,
    ),  # fmt: skip
)
"""The profile's probes in the order they run, with their shares of the progress (sum 1)."""


SERVING_UNMEASURED = {
    "served_extra_ms": "the light serving probe served no batch, so the runtime's extra cost "
    "per batch and per answer could not be measured here; predictions add none"
}


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
    (or, on a loaded machine, speeds) the next run; 0 where that median does not stand out of
    the pairs' own noise (`beyond_noise`). Pairs cancel the machine's slow drift;
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
    return [(gap, round(beyond_noise(extras[gap]), 4)) for gap in gaps_ms]


def beyond_noise(differences: list[float]) -> float:
    """The median of paired differences when it stands out of their own noise (more than
    NOISE_ERRORS standard errors of a median from 0: 1.2533 x 1.4826 x MAD / sqrt(n)), else 0.
    On loaded cores a 40 ms model's six pairs part by tens of ms either way, and a median of
    such noise, added to every batch after an idle spell, made the predicted p99 at a low rate
    higher than at a rate four times as high."""
    values = np.asarray(differences, dtype=np.float64)
    if not len(values):
        return 0.0
    median = float(np.median(values))
    spread = 1.4826 * float(np.median(np.abs(values - median)))
    error = 1.2533 * spread / np.sqrt(len(values))
    return median if abs(median) > NOISE_ERRORS * error else 0.0


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
