"""Latency per batch size of a model on a backend: the input of the batching simulator.

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
optistudio.core.batching.handoff), which the simulator adds to every batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from optistudio.core.backends import LoadedModel, SessionOptions, get_backend
from optistudio.core.batching.applicability import require_batch_dim
from optistudio.core.batching.settings import serving_options, with_serving_threads
from optistudio.core.data.inputs import synthesize_inputs
from optistudio.core.machine.environment import fingerprint
from optistudio.core.model.info import TensorSpec
from optistudio.core.model.intake import inspect_model
from pydantic import BaseModel, ConfigDict, Field, model_validator

ProgressCallback = Callable[[float, str], None]
QUANTILE_COUNT = 101
QUANTILES = np.linspace(0, 100, QUANTILE_COUNT)
MAX_RUNS = 5000
PROGRESS_EVERY_S = 0.5
HANDOFF_REQUESTS = 8
"""Distinct one-row requests cycled by the hand-back closed loop."""


class LatencyProfile(BaseModel):
    """Measured latency (ms) per batch size, sorted by batch size."""

    model_config = ConfigDict(extra="forbid")

    batch_sizes: list[int] = Field(description="Measured batch sizes, ascending.")
    mean_ms: list[float] = Field(description="Mean latency of one run at each batch size.")
    p50_ms: list[float] = Field(default_factory=list)
    p99_ms: list[float] = Field(default_factory=list)
    quantiles_ms: list[list[float]] = Field(
        default_factory=list,
        description="Per batch size, latency at percentiles 0, 1, ..., 100 (101 values).",
    )
    runs: list[tuple[int, float]] = Field(
        default_factory=list,
        description="Every timed run in the order it ran: (batch size, ms). Empty in profiles "
        "made before runs were kept; the simulator then draws from quantiles_ms.",
    )
    handoff_ms: float | None = Field(
        default=None,
        ge=0,
        description="Mean time (ms) from the end of one batch's run to the cut of the next "
        "under a saturating closed loop through the Pipeline at the largest batch size: results "
        "handed back, callers woken, the next batch cut. The simulator adds it per batch. None "
        "in profiles made before it was measured.",
    )
    backend: str = ""
    environment: dict[str, object] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> LatencyProfile:
        if not self.batch_sizes or len(self.batch_sizes) != len(self.mean_ms):
            raise ValueError("a profile needs one mean latency per batch size")
        if self.batch_sizes != sorted(set(self.batch_sizes)) or self.batch_sizes[0] < 1:
            raise ValueError("batch sizes must be distinct, ascending and >= 1")
        if min(self.mean_ms) <= 0:
            raise ValueError("latencies must be positive")
        if self.quantiles_ms and (
            len(self.quantiles_ms) != len(self.batch_sizes)
            or len({len(q) for q in self.quantiles_ms}) != 1
            or len(self.quantiles_ms[0]) < 2
        ):
            raise ValueError("quantiles_ms needs as many values for every batch size (>= 2)")
        if self.runs and not {size for size, _ in self.runs} <= set(self.batch_sizes):
            raise ValueError("runs may only hold measured batch sizes")
        if any(ms <= 0 for _, ms in self.runs):
            raise ValueError("run latencies must be positive")
        return self

    def latency_ms(self, batch_size: int) -> float:
        """Latency of a batch of this size (interpolated between measured sizes)."""
        sizes, means = self.batch_sizes, self.mean_ms
        if len(sizes) == 1:
            return means[0] * batch_size / sizes[0] if batch_size > sizes[0] else means[0]
        if batch_size <= sizes[-1]:
            return float(np.interp(batch_size, sizes, means))
        slope = (means[-1] - means[-2]) / (sizes[-1] - sizes[-2])
        return means[-1] + max(slope, 0.0) * (batch_size - sizes[-1])

    def scaled(self, factor: float) -> LatencyProfile:
        """The same profile with the model `factor` times as slow (every latency scaled; the
        runtime's hand-back time per batch is not the model's and stays)."""
        if factor <= 0:
            raise ValueError(f"a speed factor must be positive, got {factor}")
        return self.model_copy(
            update={
                "mean_ms": [ms * factor for ms in self.mean_ms],
                "p50_ms": [ms * factor for ms in self.p50_ms],
                "p99_ms": [ms * factor for ms in self.p99_ms],
                "quantiles_ms": [[ms * factor for ms in row] for row in self.quantiles_ms],
                "runs": [(size, ms * factor) for size, ms in self.runs],
            }
        )

    def ceiling(self, max_batch_size: int, *, with_handoff: bool = False) -> tuple[float, int]:
        """The best throughput one instance can reach (rows/s) and the batch size giving it:
        the model's own (bare runs back to back), or with_handoff the runtime's, each batch
        also paying `handoff_ms`."""
        extra = (self.handoff_ms or 0.0) if with_handoff else 0.0
        best = max(range(1, max_batch_size + 1), key=lambda b: b / (self.latency_ms(b) + extra))
        return best / (self.latency_ms(best) + extra) * 1000.0, best

    def quantile_curve(self, batch_size: int) -> np.ndarray:
        """Latency percentiles (ms) at a batch size: the measured spread relative to the mean,
        interpolated between measured sizes, scaled so that drawing along the curve (linear
        between percentiles) averages `latency_ms`. Flat without quantiles."""
        mean = self.latency_ms(batch_size)
        if not self.quantiles_ms:
            return np.full(QUANTILE_COUNT, mean)
        table = np.asarray(self.quantiles_ms) / np.asarray(self.mean_ms)[:, None]
        sizes = np.asarray(self.batch_sizes)
        count = table.shape[1]
        shape = np.array([np.interp(batch_size, sizes, table[:, k]) for k in range(count)])
        drawn_mean = float((shape[:-1] + shape[1:]).mean() / 2)
        return shape * (mean / drawn_mean)

    def speed_timeline(self) -> tuple[np.ndarray, np.ndarray]:
        """The runs as a clock of work: cumulative wall seconds and, at the same points,
        cumulative work in seconds at the profile's mean speed (a run of size b is
        latency_ms(b) of work). Both start at 0; their ratio over a stretch is the machine's
        speed then, and over all runs it is 1."""
        wall = np.cumsum([0.0] + [ms for _, ms in self.runs]) / 1000.0
        work = np.cumsum([0.0] + [self.latency_ms(size) for size, _ in self.runs]) / 1000.0
        return wall, work


def default_batch_sizes(max_batch_size: int) -> list[int]:
    """1, 2, 4, ... up to max_batch_size, with max_batch_size itself."""
    sizes, size = [], 1
    while size < max_batch_size:
        sizes.append(size)
        size *= 2
    return [*sizes, max_batch_size]


def measure_profile(
    model_path: Path,
    *,
    max_batch_size: int,
    backend: str = "onnxruntime",
    options: SessionOptions | None = None,
    shapes: dict[str, list[int]] | None = None,
    batch_sizes: list[int] | None = None,
    min_runs: int = 10,
    min_seconds: float = 0.3,
    progress: ProgressCallback | None = None,
) -> LatencyProfile:
    """Time the model at each batch size (default: powers of two up to max_batch_size), with
    the session options it will be served with (default: `serving_options`; options without
    threads get `serving_threads`, as the Pipeline gives them).

    Raises InvalidSpec when the model has no dynamic batch dim; `progress` may raise
    optistudio.core.errors.Cancelled to stop.
    """
    info = inspect_model(model_path)
    require_batch_dim(info)
    sizes = sorted(set(batch_sizes or default_batch_sizes(max_batch_size)))
    options = with_serving_threads(options or serving_options())
    model = get_backend(backend).load(model_path, options)
    try:
        feeds = {
            size: synthesize_inputs(info.inputs, batch_size=size, overrides=shapes or {})[0]
            for size in sizes
        }
        runs = interleaved_runs(
            model, feeds, min_runs=min_runs, min_seconds=min_seconds * len(sizes),
            progress=progress,
        )  # fmt: skip
        rows = [[ms for size, ms in runs if size == wanted] for wanted in sizes]
        if progress:
            progress(0.95, f"hand-back time per batch under load at batch {sizes[-1]}")
        handoff = _handoff(model, info.inputs, shapes, sizes[-1], float(np.mean(rows[-1])))
    finally:
        model.close()
    return LatencyProfile(
        batch_sizes=sizes,
        mean_ms=[float(np.mean(r)) for r in rows],
        p50_ms=[float(np.percentile(r, 50)) for r in rows],
        p99_ms=[float(np.percentile(r, 99)) for r in rows],
        quantiles_ms=[np.percentile(r, QUANTILES).tolist() for r in rows],
        runs=runs,
        handoff_ms=handoff,
        backend=backend,
        environment=fingerprint(threads=options.threads),
    )


def _handoff(
    model: LoadedModel,
    inputs: list[TensorSpec],
    shapes: dict[str, list[int]] | None,
    max_batch_size: int,
    batch_ms: float,
) -> float | None:
    from optistudio.core.batching.handoff import (
        measure_handoff,  # here: loadgen -> simulate -> profile
    )

    requests = [
        synthesize_inputs(inputs, batch_size=1, overrides=shapes or {}, seed=seed)[0]
        for seed in range(HANDOFF_REQUESTS)
    ]
    return measure_handoff(
        model, inputs, requests, max_batch_size=max_batch_size, batch_ms=batch_ms
    )


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
