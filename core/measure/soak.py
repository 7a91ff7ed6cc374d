"""Memory soak: run a model for a while with varying inputs and test RSS for growth.

After a warm-up that runs every input variant (batch sizes, and for dynamic models other
shapes) so the runtime's arenas reach their high-water mark, the model runs round-robin over the
variants and the process RSS is sampled every `sample_interval_s`. Growth per inference is fitted
on block means, which tames the autocorrelation of RSS samples (allocator steps last many
samples): the samples are cut into B = min(10, samples) consecutive blocks, each gives
(mean inference count x_k, mean RSS y_k), and ordinary least squares gives

    slope b = S_xy / S_xx,   SE(b) = sqrt( sum (y_k - a - b x_k)^2 / (B - 2) / S_xx ),
    95 % interval = b +- t_{0.975, B-2} SE(b).

The verdict is "leak suspected" when the whole interval is above zero, the slope reaches
`min_slope_bytes` per inference *and* the fitted growth over the run, b x inferences, reaches
`min_growth_mb`. Otherwise "stable". Both floors are there because a clean session is not flat
to the byte: allocator bookkeeping and fragmentation drift by a few bytes per inference (about
4 B measured on ONNX Runtime over 280,000 inferences, see bench/diagnostics.py), which a long
run would find statistically significant and RSS moves in whole pages. A run with fewer than
4 samples cannot be judged ("too short"). GPU memory is not sampled: this build has no GPU
backend that runs here, and the report says so.
"""

from __future__ import annotations

import itertools
import math
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
import psutil
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.backends import LoadedModel, get_backend
from optistudio.core.backends.target import BackendName, DeviceName, RunsOnTarget, Threads
from optistudio.core.data.batch import batch_dim_names, batch_sizes_to_run
from optistudio.core.data.inputs import (
    DEFAULT_DYNAMIC_DIM,
    shapes_of,
)
from optistudio.core.data.model_inputs import ModelInputs
from optistudio.core.errors import InvalidSpec
from optistudio.core.machine.environment import fingerprint
from optistudio.core.model.info import ModelInfo
from optistudio.core.model.intake import inspect_model
from optistudio.core.progress import ProgressCallback, ignore_progress

MIB = 1024 * 1024
BLOCKS = 10
MAX_STORED_SAMPLES = 400
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306}
"""Student t quantiles (0.975) by degrees of freedom, B - 2 for B blocks."""

Verdict = Literal["leak suspected", "stable", "too short"]


class SoakSpec(ModelInputs, RunsOnTarget):
    """How long to soak and over which inputs."""

    model_config = ConfigDict(extra="forbid")

    backend: BackendName = "onnxruntime"
    device: DeviceName = "cpu"
    seconds: float = Field(default=30.0, gt=0, le=86_400, description="How long to run.")
    max_inferences: int | None = Field(
        default=None, ge=10, description="Stop after this many inferences (if sooner)."
    )
    batch_sizes: list[int] = Field(
        default_factory=lambda: [1, 2, 4, 8],
        description="Batch sizes to cycle through (only the fixed batch when the model has one).",
    )
    dim_sizes: list[int] = Field(
        default_factory=lambda: [DEFAULT_DYNAMIC_DIM // 2, DEFAULT_DYNAMIC_DIM],
        description="Sizes cycled for dynamic dims other than the batch (sequence lengths...).",
    )
    threads: Threads = None
    warmup_rounds: int = Field(default=3, ge=1, le=1000, description="Warm-up passes over inputs.")
    sample_interval_s: float = Field(
        default=0.05, gt=0, le=60, description="Seconds between RSS samples."
    )
    min_growth_mb: float = Field(
        default=2.0, ge=0, description="Least fitted growth over the run to call it a leak."
    )
    min_slope_bytes: float = Field(
        default=32.0,
        ge=0,
        description="Least growth per inference to call it a leak (a clean session drifts by a "
        "few bytes per inference).",
    )


class SoakReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    spec: SoakSpec
    verdict: Verdict
    sentence: str
    inferences: int
    duration_s: float
    slope_bytes: float = Field(description="Fitted RSS growth per inference, bytes.")
    slope_low: float = Field(description="95 % interval of the slope, low end (bytes).")
    slope_high: float
    fitted_growth_mb: float = Field(description="slope x inferences, MiB.")
    rss_start_mb: float
    rss_end_mb: float
    rss_peak_mb: float
    variants: list[dict[str, list[int]]] = Field(description="Input shapes cycled through.")
    samples: list[tuple[int, float, float]] = Field(
        description="(inferences, seconds, RSS MiB), thinned to at most 400."
    )
    gpu_memory: str = Field(description="Why GPU memory was not sampled, or its figures.")
    environment: dict[str, Any] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)


def soak(
    model_path: Path,
    spec: SoakSpec,
    *,
    info: ModelInfo | None = None,
    progress: ProgressCallback | None = None,
) -> SoakReport:
    """Load the model on the spec's backend and soak it (see the module docstring)."""
    info = info or inspect_model(model_path)
    variants, warnings = input_variants(info, spec)
    model = get_backend(spec.backend).load(model_path, spec.run_target.session_options())
    try:
        report = soak_loaded(model, variants, spec, progress=progress)
    finally:
        model.close()
    report.warnings = warnings + report.warnings
    return report


def input_variants(
    info: ModelInfo, spec: SoakSpec
) -> tuple[list[dict[str, np.ndarray]], list[str]]:
    """Feeds for every (batch size, dim size) the model accepts, made once up front.

    Inputs given a full shape, an array or named dims keep them in every variant."""
    arrays = spec.arrays(info.inputs)
    shapes = {**spec.shapes, **shapes_of(arrays)}
    batches = batch_sizes_to_run(
        info.inputs,
        shapes=shapes,
        requested=None,
        default=spec.batch_sizes,
        axes=spec.batch_axes,
    )
    kept = batch_dim_names(info.inputs, spec.batch_axes) | set(spec.dims)
    names = sorted(
        {
            dim
            for s in info.inputs
            if s.name not in shapes
            for index, dim in enumerate(s.shape)
            if index > 0 and isinstance(dim, str) and dim not in kept
        }
    )
    sizes = spec.dim_sizes if names else [0]
    variants, warnings = [], []
    for batch, size in itertools.product(batches, sizes):
        dims = {name: size for name in names} | spec.dims
        at_size = spec.model_inputs.model_copy(update={"dims": dims})
        feeds, notes = at_size.feeds(info.inputs, batch_size=batch, arrays=arrays)
        variants.append(feeds)
        warnings.extend(notes)
    if not variants:
        raise InvalidSpec("No input shape to soak the model with.")
    return variants, list(dict.fromkeys(warnings))


def soak_loaded(
    model: LoadedModel,
    variants: list[dict[str, np.ndarray]],
    spec: SoakSpec,
    *,
    progress: ProgressCallback | None = None,
) -> SoakReport:
    """Soak an already loaded model over `variants` (any LoadedModel: tests wrap one)."""
    report_progress = progress or ignore_progress
    for _ in range(spec.warmup_rounds):
        for feeds in variants:
            model.run(feeds)
    samples, count, start = _run_sampled(model, variants, spec, report_progress)
    return _report(spec, variants, samples, count, time.perf_counter() - start)


def _run_sampled(
    model: LoadedModel,
    variants: list[dict[str, np.ndarray]],
    spec: SoakSpec,
    progress: ProgressCallback,
) -> tuple[list[tuple[int, float, float]], int, float]:
    process = psutil.Process()
    start = last = time.perf_counter()
    samples = [(0, 0.0, process.memory_info().rss / MIB)]
    count, limit = 0, spec.max_inferences or math.inf
    while count < limit:
        model.run(variants[count % len(variants)])
        count += 1
        now = time.perf_counter()
        if now - last >= spec.sample_interval_s:
            last = now
            samples.append((count, now - start, process.memory_info().rss / MIB))
            done = max((now - start) / spec.seconds, count / limit)
            progress(min(done, 1.0), f"{count} inferences, RSS {samples[-1][2]:.1f} MiB")
            if now - start >= spec.seconds:
                break
    samples.append((count, time.perf_counter() - start, process.memory_info().rss / MIB))
    return samples, count, start


def fit_growth(samples: list[tuple[int, float, float]]) -> tuple[float, float, float] | None:
    """Slope of RSS (bytes) per inference on block means, and its 95 % interval; None if < 4."""
    if len(samples) < 4:
        return None
    x = np.array([s[0] for s in samples], dtype=np.float64)
    y = np.array([s[2] for s in samples], dtype=np.float64) * MIB
    blocks = min(BLOCKS, len(samples))
    xb = np.array([part.mean() for part in np.array_split(x, blocks)])
    yb = np.array([part.mean() for part in np.array_split(y, blocks)])
    sxx = float(((xb - xb.mean()) ** 2).sum())
    if sxx == 0:
        return None
    slope = float(((xb - xb.mean()) * (yb - yb.mean())).sum() / sxx)
    residuals = yb - yb.mean() - slope * (xb - xb.mean())
    se = math.sqrt(float((residuals**2).sum()) / (blocks - 2) / sxx)
    t = T_975[min(blocks - 2, max(T_975))]
    return slope, slope - t * se, slope + t * se


def _report(
    spec: SoakSpec,
    variants: list[dict[str, np.ndarray]],
    samples: list[tuple[int, float, float]],
    count: int,
    duration: float,
) -> SoakReport:
    fit = fit_growth(samples)
    slope, low, high = fit if fit else (0.0, 0.0, 0.0)
    growth_mb = slope * count / MIB
    verdict: Verdict = "too short" if fit is None else "stable"
    if (
        fit is not None
        and low > 0
        and slope >= spec.min_slope_bytes
        and growth_mb >= spec.min_growth_mb
    ):
        verdict = "leak suspected"
    rss = [s[2] for s in samples]
    return SoakReport(
        spec=spec,
        verdict=verdict,
        sentence=_sentence(verdict, slope, low, high, count, growth_mb),
        inferences=count,
        duration_s=duration,
        slope_bytes=slope,
        slope_low=low,
        slope_high=high,
        fitted_growth_mb=growth_mb,
        rss_start_mb=rss[0],
        rss_end_mb=rss[-1],
        rss_peak_mb=max(rss),
        variants=[{name: list(array.shape) for name, array in v.items()} for v in variants],
        samples=_thinned(samples),
        gpu_memory="not sampled: no GPU backend runs on this machine",
        environment=fingerprint(threads=spec.threads),
    )


def _sentence(
    verdict: Verdict, slope: float, low: float, high: float, count: int, growth_mb: float
) -> str:
    if verdict == "too short":
        return f"Too short to judge: {count} inferences gave fewer than 4 RSS samples."
    figures = (
        f"RSS grows {slope:,.0f} B per inference (95 % CI {low:,.0f} to {high:,.0f} B), "
        f"{growth_mb:.1f} MiB over {count:,} inferences"
    )
    if verdict == "leak suspected":
        per_million = slope * 1e6 / MIB
        return f"Leak suspected: {figures}; that is {per_million:,.0f} MiB per million inferences."
    return f"Stable: {figures}."


def _thinned(samples: list[tuple[int, float, float]]) -> list[tuple[int, float, float]]:
    if len(samples) <= MAX_STORED_SAMPLES:
        return samples
    picks = np.linspace(0, len(samples) - 1, MAX_STORED_SAMPLES).round().astype(int)
    return [samples[i] for i in sorted(set(picks.tolist()))]
