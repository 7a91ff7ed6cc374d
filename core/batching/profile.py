"""Latency per batch size of a model on a backend: the input of the batching simulator.

Each batch size is timed on synthetic inputs after a warm-up, for at least `min_runs` runs and
`min_seconds`; the profile keeps the mean (what throughput depends on), the p50/p99, and the
latency percentiles 0, 1, ..., 100 (`quantiles_ms`), from which the simulator draws service
times so that run-to-run spread shows in the predicted tail.
Between measured sizes latency is interpolated linearly; past the largest it is extrapolated
along the last segment's slope.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from core.backends import LoadedModel, SessionOptions, get_backend
from core.batching.applicability import require_batch_dim
from core.environment import fingerprint
from core.inputs import synthesize_inputs
from core.intake import inspect_model

ProgressCallback = Callable[[float, str], None]
QUANTILE_COUNT = 101
QUANTILES = np.linspace(0, 100, QUANTILE_COUNT)


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

    def ceiling(self, max_batch_size: int) -> tuple[float, int]:
        """The best throughput one instance can reach (rows/s) and the batch size giving it."""
        best = max(range(1, max_batch_size + 1), key=lambda b: b / self.latency_ms(b))
        return best / self.latency_ms(best) * 1000.0, best

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
    """Time the model at each batch size (default: powers of two up to max_batch_size).

    Raises InvalidSpec when the model has no dynamic batch dim; `progress` may raise
    core.errors.Cancelled to stop.
    """
    info = inspect_model(model_path)
    require_batch_dim(info)
    sizes = sorted(set(batch_sizes or default_batch_sizes(max_batch_size)))
    model = get_backend(backend).load(model_path, options or SessionOptions())
    try:
        rows = []
        for index, size in enumerate(sizes):
            if progress:
                progress(index / len(sizes), f"timing batch size {size}")
            feeds, _ = synthesize_inputs(info.inputs, batch_size=size, overrides=shapes or {})
            rows.append(time_runs(model, feeds, min_runs=min_runs, min_seconds=min_seconds))
    finally:
        model.close()
    return LatencyProfile(
        batch_sizes=sizes,
        mean_ms=[float(np.mean(r)) for r in rows],
        p50_ms=[float(np.percentile(r, 50)) for r in rows],
        p99_ms=[float(np.percentile(r, 99)) for r in rows],
        quantiles_ms=[np.percentile(r, QUANTILES).tolist() for r in rows],
        backend=backend,
        environment=fingerprint(threads=(options or SessionOptions()).threads),
    )


def time_runs(
    model: LoadedModel, feeds: dict[str, np.ndarray], *, min_runs: int, min_seconds: float
) -> list[float]:
    """Latencies (ms) of repeated runs after three warm-up runs."""
    for _ in range(3):
        model.run(feeds)
    latencies: list[float] = []
    start = time.perf_counter()
    while len(latencies) < min_runs or time.perf_counter() - start < min_seconds:
        begin = time.perf_counter()
        model.run(feeds)
        latencies.append((time.perf_counter() - begin) * 1000)
    return latencies
