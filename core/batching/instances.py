"""Several instances of a model on one machine: what a batch costs on one of N.

N instances share the machine's cores: each gets `serving_threads(N)` intra-op threads (the
Pipeline's share), and while all run at once they share memory bandwidth and caches too. So a
batch's latency on one of N busy instances is not the one-instance latency, and N instances do
not serve N times as much. The profile measures it (`measure_instances`): for each count N of
`instance_counts()` past 1, N sessions with their share of the threads run the batch sizes
interleaved at the same time, and per batch size b the slowdown
    f_N(b) = mean_N(b) / mean_1(b)
is kept (`InstanceLatency`), the one-instance mean taken from the same profile.

A prediction at N instances takes the profile's latencies times f_N (its runs, quantiles and
means alike; the runtime's own costs per batch, hand-back and serving extra, are not the model's
and stay). For a count that was not measured (`instance_factors`):
  - between two measured counts, f is interpolated linearly in N;
  - past the largest measured count M, f_N = f_M * N / M: the instances share the cores M
    already filled, so N of them serve no more than M did (stated rule, `instances_note`);
  - a profile that measured no count past 1 (made before they were measured, or on one core)
    predicts N instances as N independent copies of the one measured (f = 1), and says so.
The factors are measured with every instance busy, the case that sets a ceiling and a tail; a
lightly loaded instance runs beside idle ones and may be faster, so they are conservative at
low rates. Bare timings leave out what serving costs once the sessions and the serving threads
outnumber the cores: the threads wait for a core, and the runner's return and every answer with
them. So the profile also serves each measured count behind one Pipeline, at a heavy rate and
past its ceiling (`InstanceLatency.served_load`, `serving_delays_ms`, `saturation`), and a
prediction at that count takes those costs in place of one instance's
(`LatencyProfile.served_as`).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.backends import LoadedModel, SessionOptions, get_backend
from optistudio.core.batching.settings import with_serving_threads
from optistudio.core.machine.affinity import available_cores

MAX_RUNS_PER_INSTANCE = 5000
STRAGGLE = 10.0
"""A concurrent measurement stops after this many times its planned seconds once every session
finished a round of its sizes."""
FIRST_ROUND_CAP_S = 30.0
"""The longest it waits for that first round; a count with a size left untimed is dropped."""


class InstanceLatency(BaseModel):
    """Latency on one of `instances` sessions running at once, against one instance alone."""

    model_config = ConfigDict(extra="forbid")

    instances: int = Field(ge=2, description="Sessions that ran at the same time.")
    threads: int = Field(ge=1, description="Intra-op threads of each session.")
    slowdown: list[float] = Field(
        description="Per batch size of the profile, the mean latency of a run on one of these "
        "busy instances over the profile's one-instance mean (f_N(b)).",
    )
    mean_ms: list[float] = Field(description="Per batch size, the mean latency measured (ms).")
    runs: int = Field(ge=0, description="Runs timed, all instances together.")
    served_load: tuple[float, float] | None = Field(
        default=None,
        description="(request rate req/s, extra ms per runner call): these instances served "
        "at once behind the real Pipeline at the heavy probe's share of their ceiling "
        "(optistudio.core.batching.handoff.measure_served_extra_under_load), the extra each "
        "call took beyond the latency above. Where the instances and the serving threads "
        "outnumber the cores, the threads wait for one, so the runner's return and every "
        "answer are later than with one instance. None: it fell behind, or not measured "
        "(profiles made before it).",
    )
    serving_delays_ms: list[float] = Field(
        default_factory=list,
        description="Per request of that run, its latency beyond its queue wait and its "
        "batch's runner call (as `LatencyProfile.serving_delays_ms`). Empty where not measured.",
    )
    saturation: tuple[float, float] | None = Field(
        default=None,
        description="(rows/s, extra ms per runner call): the pace these instances served at "
        "behind the real Pipeline with its queue never empty, and the extra per call that "
        "makes their predicted ceiling that pace (optistudio.core.batching.handoff."
        "measure_saturation), where it fell short of what their latencies give; they share "
        "the serving threads, the GIL and the cores with them. None: kept that pace, or not "
        "measured (profiles made before it).",
    )


def served_row(table: list[InstanceLatency], instances: int) -> InstanceLatency | None:
    """The row whose served measurements `instances` instances are predicted with: that
    count's, else the largest measured count below it that has them (more instances share the
    same serving threads, so they serve no better than fewer did); None for one instance or
    none served."""
    below = [
        row
        for row in table
        if 1 < row.instances <= instances and (row.served_load or row.saturation)
    ]
    return max(below, key=lambda row: row.instances) if below else None


def instance_counts(cores: int | None = None) -> list[int]:
    """Instance counts worth measuring here: 1, 2, 4, ... below the cores this process may
    use, and that core count itself (on 2 cores: 1 and 2)."""
    cores = max(1, cores if cores is not None else len(available_cores()))
    counts, count = [], 1
    while count < cores:
        counts.append(count)
        count *= 2
    return sorted({*counts, cores})


def instance_factors(
    table: list[InstanceLatency], sizes: int, instances: int
) -> list[float] | None:
    """f_N per batch size for `instances` by the module docstring's rules; None for one
    instance or a profile without measured counts (independent copies)."""
    if instances <= 1 or not table:
        return None
    points = [(1, [1.0] * sizes), *((row.instances, row.slowdown) for row in table)]
    counts = [count for count, _ in points]
    if instances in counts:
        return list(points[counts.index(instances)][1])
    largest, factors = points[-1]
    if instances > largest:
        return [f * instances / largest for f in factors]
    upper = int(np.searchsorted(counts, instances))
    (low, lows), (high, highs) = points[upper - 1], points[upper]
    share = (instances - low) / (high - low)
    return [a + (b - a) * share for a, b in zip(lows, highs, strict=True)]


def instances_note(table: list[InstanceLatency], instances: int) -> str:
    """One sentence on how `instances` instances are predicted when that count was not
    measured; empty when it was (or for one instance)."""
    measured = [row.instances for row in table]
    if instances <= 1 or instances in measured:
        return ""
    if not measured:
        return (
            f"This profile measured one instance only: {instances} instances are predicted as "
            "independent copies of it, though on a CPU they share the cores; profile again to "
            "measure them, or verify before trusting the gain."
        )
    largest = max(measured)
    if instances > largest:
        return (
            f"{instances} instances were not measured (at most {largest}): they are predicted "
            f"to share the cores {largest} filled, each {instances / largest:.2g}x as slow as "
            f"one of {largest}, so they serve no more than {largest} did."
        )
    return (
        f"{instances} instances were not measured: their slowdown is interpolated between the "
        f"measured counts {[1, *measured]}."
    )


def measure_instances(
    model_path: Path,
    backend: str,
    options: SessionOptions,
    feeds: dict[int, dict[str, np.ndarray]],
    one_instance_ms: list[float],
    *,
    counts: list[int],
    min_runs: int,
    min_seconds: float,
) -> list[InstanceLatency]:
    """Per count N > 1 of `counts`: N sessions (each `with_serving_threads(options, N)`) run
    the sizes of `feeds` interleaved, all at once, for at least `min_seconds` and `min_runs`
    rounds each; their mean per size against `one_instance_ms` (the same sizes)."""
    rows = []
    for count in (n for n in counts if n > 1):
        served = with_serving_threads(options, count)
        models = [get_backend(backend).load(model_path, served) for _ in range(count)]
        try:
            runs = concurrent_runs(models, feeds, min_runs=min_runs, min_seconds=min_seconds)
        finally:
            for model in models:
                model.close()
        timed = [[ms for b, ms in runs if b == size] for size in feeds]
        if not all(timed):  # a size no instance finished in time: the count stays unmeasured
            continue
        means = [float(np.mean(values)) for values in timed]
        rows.append(
            InstanceLatency(
                instances=count,
                threads=served.threads or 1,
                slowdown=[round(m / o, 4) for m, o in zip(means, one_instance_ms, strict=True)],
                mean_ms=[round(m, 4) for m in means],
                runs=len(runs),
            )
        )
    return rows


def concurrent_runs(
    models: list[LoadedModel],
    feeds: dict[int, dict[str, np.ndarray]],
    *,
    min_runs: int,
    min_seconds: float,
) -> list[tuple[int, float]]:
    """(batch size, ms) of every run of all `models` running at once, each in rounds of one
    run per size in its own seeded order after three warm-up runs per size. The clock starts
    when every model is warm; it stops once `min_seconds` passed and each has `min_runs`
    rounds (or after STRAGGLE times the seconds)."""
    order = list(feeds)
    done = [0] * len(models)
    runs: list[list[tuple[int, float]]] = [[] for _ in models]
    failures: list[BaseException] = []
    start, stop = threading.Barrier(len(models) + 1), threading.Event()

    def serve(index: int) -> None:
        try:
            model, rng = models[index], np.random.default_rng(index)
            for size in order * 3:
                model.run(feeds[size])
            start.wait()
            while not stop.is_set() and len(runs[index]) < MAX_RUNS_PER_INSTANCE:
                for pick in rng.permutation(len(order)):
                    began = time.perf_counter()
                    model.run(feeds[order[pick]])
                    runs[index].append((order[pick], (time.perf_counter() - began) * 1000))
                done[index] += 1
        except BaseException as exc:  # re-raised in the caller's thread
            failures.append(exc)
            start.abort()

    workers = [threading.Thread(target=serve, args=(i,), daemon=True) for i in range(len(models))]
    for worker in workers:
        worker.start()
    try:
        start.wait()
        began = time.perf_counter()
        while not failures:
            elapsed = time.perf_counter() - began
            if elapsed >= min_seconds and min(done) >= min_runs:
                break
            # past the straggle allowance, one whole round of each will do (a loaded machine
            # can hold a session back that long); never more than FIRST_ROUND_CAP_S for it
            if elapsed >= min_seconds * STRAGGLE and (
                min(done) >= 1 or elapsed >= FIRST_ROUND_CAP_S
            ):
                break
            time.sleep(0.01)
    except threading.BrokenBarrierError:
        pass
    stop.set()
    for worker in workers:
        worker.join()
    if failures:
        raise failures[0]
    return [run for instance in runs for run in instance]
