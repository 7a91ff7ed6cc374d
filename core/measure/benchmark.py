"""The benchmark engine: warm-up, then timed runs in windows until the figure is trustworthy.

Each batch size is measured in windows of at least `window_seconds`. The run stops when it has
at least `min_runs` samples, has lasted `min_seconds`, and the last `stability_windows` window
medians agree within `stability_tolerance` (see `optistudio.core.measure.stats`). If that never happens it stops at
`max_seconds` and the result is flagged unstable, with its spread, rather than silently reported.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from pydantic import BaseModel, ConfigDict, Field, model_validator

from optistudio.core.backends import LoadedModel, get_backend
from optistudio.core.backends.base import Precision
from optistudio.core.backends.target import BackendName, DeviceName, RunsOnTarget, Threads
from optistudio.core.data.batch import batch_sizes_to_run
from optistudio.core.data.inputs import (
    shapes_of,
)
from optistudio.core.data.model_inputs import ModelInputs
from optistudio.core.errors import InvalidSpec
from optistudio.core.machine.affinity import pinned_to
from optistudio.core.machine.contention import ContentionMonitor, ContentionReport
from optistudio.core.machine.environment import fingerprint
from optistudio.core.measure.stats import latency_summary, window_spread, windows_agree
from optistudio.core.metrics import unit_of
from optistudio.core.model.info import ModelInfo
from optistudio.core.model.intake import inspect_model
from optistudio.core.numerics.crosscheck import OutputCheck, check_outputs, reference_outputs
from optistudio.core.progress import ProgressCallback, ignore_progress

MIN_WINDOW_RUNS = 3
DEFAULT_BATCH_SIZES = (1, 8)
MIB = 1024 * 1024


class BenchmarkSpec(ModelInputs, RunsOnTarget):
    """What to measure and how long. Every field is shown, with its help, in the studio."""

    model_config = ConfigDict(extra="forbid")

    backend: BackendName = "onnxruntime"
    device: DeviceName = "cpu"
    precision: Precision = Field(
        default="fp32",
        description="Precision to run in (the backend refuses one it cannot run, naming those "
        "it can).",
    )
    execution_provider: str | None = Field(
        default=None,
        description="ONNX Runtime only: cpu, cuda, tensorrt, openvino, dnnl or cann; empty = the "
        "device's own.",
    )
    io_binding: bool = Field(
        default=False,
        description="ONNX Runtime only: keep inputs bound on the device (times the model "
        "without the host-to-device copy).",
    )
    check_outputs: bool = Field(
        default=True,
        description="Check the outputs against ONNX Runtime FP32 on CPU with a tolerance that "
        "fits the precision (skipped for that reference itself).",
    )
    batch_sizes: list[int] | None = Field(
        default=None,
        description="Batch sizes to measure. Empty: 1 and 8 when the batch dim is dynamic, "
        "else the model's fixed batch; with a full shape for every input, the batch it implies.",
    )
    threads: Threads = None
    cpu_affinity: list[int] | None = Field(
        default=None,
        description="Pin the run to these CPU cores, e.g. [0, 1]; empty = wherever the OS likes.",
    )
    warmup_runs: int = Field(default=5, ge=0, le=10_000, description="Untimed runs first.")
    min_runs: int = Field(default=30, ge=1, le=1_000_000, description="Least timed runs.")
    min_seconds: float = Field(default=2.0, ge=0, le=3600, description="Least timed seconds.")
    max_seconds: float = Field(
        default=20.0, gt=0, le=3600, description="Cap per batch size; unstable if reached."
    )
    window_seconds: float = Field(
        default=0.5, gt=0, le=600, description="Length of one stability window."
    )
    stability_windows: int = Field(default=3, ge=2, le=20, description="Windows that must agree.")
    stability_tolerance: float = Field(
        default=0.10, gt=0, le=1, description="Allowed deviation of window p50s from their mean."
    )
    seed: int = Field(default=0, description="Seed of the synthetic inputs.")

    @model_validator(mode="after")
    def _check(self) -> BenchmarkSpec:
        if self.max_seconds < self.min_seconds:
            raise ValueError(
                f"max_seconds must be at least min_seconds ({self.max_seconds:g} s < "
                f"{self.min_seconds:g} s): lower min_seconds with it, or raise max_seconds"
            )
        if self.batch_sizes is not None:
            if not self.batch_sizes or min(self.batch_sizes) < 1:
                raise ValueError("batch_sizes must be positive integers")
            self.batch_sizes = sorted(set(self.batch_sizes))
        return self


class BatchResult(BaseModel):
    """The measurement of one batch size, on inputs of `input_shapes`."""

    model_config = ConfigDict(extra="forbid")

    backend: str
    device: str
    batch_size: int
    threads: int
    latency: dict[str, float]
    throughput: float = Field(description="inferences (samples) per second")
    samples: int
    duration_s: float
    window_p50s_ms: list[float]
    window_spread: float
    stable: bool
    peak_rss_mb: float
    model_rss_mb: float
    contention: ContentionReport
    input_shapes: dict[str, list[int]] = Field(
        default_factory=dict, description="The shape of each input it ran on."
    )

    def metric_values(self) -> dict[str, float]:
        values = dict(self.latency)
        values.update(
            throughput=self.throughput,
            samples=float(self.samples),
            duration_s=self.duration_s,
            window_spread=self.window_spread,
            stable=1.0 if self.stable else 0.0,
            peak_rss_mb=self.peak_rss_mb,
            model_rss_mb=self.model_rss_mb,
            other_cores=self.contention.other_cores,
            contended=1.0 if self.contention.contended else 0.0,
        )
        if self.contention.steal_share is not None:
            values["steal_share"] = self.contention.steal_share
        return values


class BenchmarkReport(BaseModel):
    """All batch sizes of one run, with the environment and what the runtime really did."""

    model_config = ConfigDict(extra="forbid")

    spec: BenchmarkSpec
    results: list[BatchResult]
    environment: dict[str, Any]
    runtime_details: dict[str, Any]
    warnings: list[str]
    output_check: OutputCheck | None = None

    def measurement_rows(self) -> list[tuple[str, int, int, str, float, str]]:
        """Long rows (backend, batch_size, threads, metric, value, unit) for storage."""
        return [
            (r.backend, r.batch_size, r.threads, name, value, unit_of(name))
            for r in self.results
            for name, value in r.metric_values().items()
        ]


def resolve_batch_sizes(
    spec: BenchmarkSpec, info: ModelInfo, arrays: dict[str, np.ndarray] | None = None
) -> list[int]:
    """The batch sizes to run: the spec's, or the defaults the model's batch dim allows; the
    one batch the full shapes imply when every input has one (given or from `arrays`)."""
    return batch_sizes_to_run(
        info.inputs,
        shapes={**spec.shapes, **shapes_of(arrays or {})},
        requested=spec.batch_sizes,
        default=DEFAULT_BATCH_SIZES,
        axes=spec.batch_axes,
    )


def run_benchmark(
    model_path: Path,
    spec: BenchmarkSpec,
    *,
    info: ModelInfo | None = None,
    progress: ProgressCallback | None = None,
) -> BenchmarkReport:
    """Measure a model on one backend for each batch size of the spec."""
    info = info or inspect_model(model_path)
    report_progress = progress or ignore_progress
    arrays = spec.arrays(info.inputs)
    batch_sizes = resolve_batch_sizes(spec, info, arrays)
    _check_runs_on(model_path, spec.backend)
    backend = get_backend(spec.backend)
    options = spec.run_target.session_options()
    report_progress(0.0, f"Loading the model on {spec.backend} ({spec.device}, {spec.precision})")
    output_check = None
    with pinned_to(spec.cpu_affinity):
        rss_before = _rss_mb()
        model = backend.load(model_path, options)
        try:
            model_rss = _rss_mb() - rss_before
            unchecked = unchecked_note(model_path) if spec.check_outputs else None
            if spec.check_outputs and not is_reference(spec) and unchecked is None:
                report_progress(0.0, "Checking the outputs against ONNX Runtime FP32 on CPU")
                output_check = _check_outputs(
                    model_path, model, _feeds(info, spec, batch_sizes[0], arrays)[0], info, spec
                )
            results, warnings = _measure_all(
                model, info, spec, batch_sizes, arrays, model_rss, report_progress
            )
            warnings = [unchecked, *warnings] if unchecked else warnings
        finally:
            model.close()
        environment = fingerprint(threads=spec.threads)
    report_progress(1.0, "Done")
    return BenchmarkReport(
        spec=spec,
        results=results,
        environment=environment,
        runtime_details=model.details,
        warnings=warnings,
        output_check=output_check,
    )


NOT_ONNX = {".xml": "an OpenVINO IR", ".tflite": "a LiteRT file"}
"""Model files ONNX Runtime cannot run, so the output check has no reference run of them."""


def unchecked_note(model_path: Path) -> str | None:
    """Why the outputs of a file ONNX Runtime cannot run are not checked (None: they are)."""
    kind = NOT_ONNX.get(Path(model_path).suffix)
    if kind is None:
        return None
    return (
        f"Outputs not checked: the model is {kind}, which ONNX Runtime cannot run as the "
        "reference; its accuracy against the model it was made from is its optimize run's."
    )


ONLY_ON = {".xml": "openvino", ".tflite": "litert"}
"""The one backend that runs each file that is not ONNX."""


def _check_runs_on(model_path: Path, backend: str) -> None:
    """InvalidSpec, in one sentence, for a file that is not ONNX on a backend it does not run on."""
    suffix = Path(model_path).suffix
    only = ONLY_ON.get(suffix)
    if only is not None and backend != only:
        raise InvalidSpec(
            f"The model is {NOT_ONNX[suffix]}, which only the {only} backend runs, not {backend}.",
            hint=f"Benchmark it with backend {only}.",
        )


def is_reference(spec: BenchmarkSpec) -> bool:
    """True for the run the output check compares with: ONNX Runtime, FP32, CPU provider."""
    return (
        spec.backend == "onnxruntime"
        and spec.device == "cpu"
        and spec.precision == "fp32"
        and spec.execution_provider in (None, "cpu")
    )


def _feeds(
    info: ModelInfo, spec: BenchmarkSpec, batch_size: int, arrays: dict[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], list[str]]:
    return spec.feeds(info.inputs, batch_size=batch_size, seed=spec.seed, arrays=arrays)


def _check_outputs(
    model_path: Path,
    model: LoadedModel,
    feeds: dict[str, np.ndarray],
    info: ModelInfo,
    spec: BenchmarkSpec,
) -> OutputCheck:
    names = [tensor.name for tensor in info.outputs]
    return check_outputs(
        names, reference_outputs(model_path, feeds), model.run(feeds), precision=spec.precision
    )


def _measure_all(
    model: LoadedModel,
    info: ModelInfo,
    spec: BenchmarkSpec,
    batch_sizes: list[int],
    arrays: dict[str, np.ndarray],
    model_rss: float,
    report_progress: ProgressCallback,
) -> tuple[list[BatchResult], list[str]]:
    results: list[BatchResult] = []
    warnings: list[str] = []
    for index, batch_size in enumerate(batch_sizes):
        feeds, feed_warnings = _feeds(info, spec, batch_size, arrays)
        warnings.extend(w for w in feed_warnings if w not in warnings)
        share = (index / len(batch_sizes), 1 / len(batch_sizes))
        results.append(_measure(model, feeds, spec, batch_size, model_rss, share, report_progress))
    return results, warnings


def _measure(
    model: LoadedModel,
    feeds: dict[str, np.ndarray],
    spec: BenchmarkSpec,
    batch_size: int,
    model_rss: float,
    share: tuple[float, float],
    report_progress: ProgressCallback,
) -> BatchResult:
    label = f"batch {batch_size}"
    report_progress(share[0], f"Warming up ({label})")
    for _ in range(spec.warmup_runs):
        model.run(feeds)
    latencies: list[float] = []
    window_p50s: list[float] = []
    peak_rss = _rss_mb()
    monitor = ContentionMonitor()
    monitor.start()
    start = time.perf_counter()
    while True:
        window = _timed_window(model, feeds, spec.window_seconds, start + spec.max_seconds)
        latencies.extend(window)
        window_p50s.append(float(np.median(window)))
        peak_rss = max(peak_rss, _rss_mb())
        monitor.sample()
        elapsed = time.perf_counter() - start
        enough = len(latencies) >= spec.min_runs and elapsed >= spec.min_seconds
        stable = windows_agree(
            window_p50s, windows=spec.stability_windows, tolerance=spec.stability_tolerance
        )
        done_share = _share_done(len(latencies), elapsed, spec)
        report_progress(share[0] + share[1] * done_share, f"Timing {label}: {len(latencies)} runs")
        if (enough and stable) or elapsed >= spec.max_seconds:
            break
    contention = monitor.stop()
    summary = latency_summary(latencies)
    return BatchResult(
        backend=spec.backend,
        device=spec.device,
        batch_size=batch_size,
        threads=int(model.details.get("threads") or spec.threads or 0),
        latency=summary,
        throughput=batch_size * len(latencies) / (sum(latencies) / 1000.0),
        samples=len(latencies),
        duration_s=elapsed,
        window_p50s_ms=window_p50s,
        window_spread=window_spread(window_p50s, windows=spec.stability_windows),
        stable=stable,
        peak_rss_mb=peak_rss,
        model_rss_mb=max(model_rss, 0.0),
        contention=contention,
        input_shapes={name: list(array.shape) for name, array in feeds.items()},
    )


def _timed_window(
    model: LoadedModel, feeds: dict[str, np.ndarray], seconds: float, deadline: float
) -> list[float]:
    """Latencies in ms of back-to-back runs for at least `seconds` (and MIN_WINDOW_RUNS runs)."""
    clock = time.perf_counter_ns
    window: list[float] = []
    window_end = time.perf_counter() + seconds
    while True:
        t0 = clock()
        model.run(feeds)
        window.append((clock() - t0) / 1e6)
        now = time.perf_counter()
        if now >= deadline or (now >= window_end and len(window) >= MIN_WINDOW_RUNS):
            return window


def _share_done(runs: int, elapsed: float, spec: BenchmarkSpec) -> float:
    towards_minimum = min(runs / spec.min_runs, elapsed / max(spec.min_seconds, 1e-9))
    return min(0.99, max(min(towards_minimum, 1.0) * 0.9, elapsed / spec.max_seconds))


def _rss_mb() -> float:
    return float(psutil.Process().memory_info().rss / MIB)
