"""The benchmark engine on a real ONNX Runtime session and on a synthetic backend."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from optistudio.core.backends import LoadedModel
from optistudio.core.errors import Cancelled, InvalidSpec
from optistudio.core.measure.benchmark import (
    BenchmarkSpec,
    _measure,
    resolve_batch_sizes,
    run_benchmark,
)
from optistudio.core.measure.stats import latency_summary, windows_agree
from optistudio.core.metrics import METRICS
from optistudio.core.model.intake import inspect_model

QUICK = {
    "warmup_runs": 1,
    "min_runs": 5,
    "min_seconds": 0.05,
    "max_seconds": 1.0,
    "window_seconds": 0.02,
}


class SleepyModel(LoadedModel):
    """A synthetic backend: each run sleeps for the next latency from a schedule (ms)."""

    def __init__(self, schedule: list[float]) -> None:
        self.schedule = schedule
        self.calls = 0
        self.details = {}

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        delay = self.schedule[min(self.calls, len(self.schedule) - 1)]
        self.calls += 1
        end = time.perf_counter() + delay / 1000
        while time.perf_counter() < end:
            pass
        return []


def test_onnxruntime_benchmark_reports_every_batch_size(tiny_model: Path) -> None:
    spec = BenchmarkSpec(batch_sizes=[1, 4], threads=1, **QUICK)

    report = run_benchmark(tiny_model, spec)

    assert [r.batch_size for r in report.results] == [1, 4]
    for result in report.results:
        lat = result.latency
        assert 0 < lat["min_ms"] <= lat["p50_ms"] <= lat["p90_ms"] <= lat["p99_ms"] <= lat["max_ms"]
        assert result.samples >= 5 and result.threads == 1
        assert result.throughput == pytest.approx(
            result.batch_size * result.samples / (lat["mean_ms"] * result.samples / 1000), rel=1e-6
        )
    assert report.runtime_details["providers"] == ["CPUExecutionProvider"]
    assert report.environment["cpu_model"]
    assert "onnxruntime" in report.environment["libraries"]


def test_measurement_rows_use_units_from_the_metric_table(tiny_model: Path) -> None:
    report = run_benchmark(tiny_model, BenchmarkSpec(batch_sizes=[2], **QUICK))

    rows = report.measurement_rows()

    metrics = {row[3]: row for row in rows}
    assert {
        "p50_ms",
        "p90_ms",
        "p95_ms",
        "p99_ms",
        "mean_ms",
        "std_ms",
        "throughput",
        "peak_rss_mb",
        "samples",
        "stable",
    } <= set(metrics)
    assert all(row[5] == METRICS[row[3]].unit for row in rows)
    assert {row[1] for row in rows} == {2}


def test_default_batch_sizes_follow_the_model(make_model) -> None:
    dynamic = inspect_model(make_model("d.onnx"))
    fixed = inspect_model(make_model("f.onnx", batch=1))

    assert resolve_batch_sizes(BenchmarkSpec(), dynamic) == [1, 8]
    assert resolve_batch_sizes(BenchmarkSpec(), fixed) == [1]
    with pytest.raises(InvalidSpec, match="fixed batch size of 1"):
        resolve_batch_sizes(BenchmarkSpec(batch_sizes=[8]), fixed)


@pytest.mark.timing
def test_stable_latency_stops_early() -> None:
    spec = BenchmarkSpec(min_runs=5, min_seconds=0.05, max_seconds=5.0, window_seconds=0.02)

    result = _measure(SleepyModel([1.0]), {}, spec, 1, 0.0, (0.0, 1.0), lambda f, m: None)

    assert result.stable
    assert result.duration_s < spec.max_seconds  # stopped when the windows agreed, not capped
    assert result.latency["p50_ms"] == pytest.approx(1.0, rel=0.3)


@pytest.mark.timing
def test_drifting_latency_is_flagged_unstable_at_the_cap() -> None:
    # Every run twice as slow as the last: any three windows differ by far more than the 10 %
    # stability margin even when, on a loaded machine, each window holds a single run and a
    # run overshoots its (wall-clock) delay by a time slice; at 25 % a step of 20 ms could be
    # evened out by such overshoots with other processes on both cores.
    drifting = [0.2 * 2.0**i for i in range(40)]
    spec = BenchmarkSpec(min_runs=5, min_seconds=0.05, max_seconds=0.4, window_seconds=0.02)

    result = _measure(SleepyModel(drifting), {}, spec, 1, 0.0, (0.0, 1.0), lambda f, m: None)

    assert not result.stable
    assert result.duration_s >= 0.4
    assert result.window_spread > 0.1


def test_progress_callback_can_cancel(tiny_model: Path) -> None:
    def cancel_after_load(fraction: float, message: str) -> None:
        if message.startswith("Timing"):
            raise Cancelled("Cancelled while running.")

    with pytest.raises(Cancelled):
        run_benchmark(tiny_model, BenchmarkSpec(**QUICK), progress=cancel_after_load)


@pytest.mark.parametrize(
    ("p50s", "expected"),
    [([10, 10.5, 9.8], True), ([10, 13, 10], False), ([10, 10], False)],
    ids=["agree", "one-window-off", "too-few-windows"],
)
def test_windows_agree(p50s: list[float], expected: bool) -> None:
    assert windows_agree(p50s, windows=3, tolerance=0.10) is expected


def test_latency_summary_percentiles() -> None:
    summary = latency_summary(list(range(1, 101)))

    assert summary["p50_ms"] == pytest.approx(50.5)
    assert summary["p99_ms"] == pytest.approx(99.01)
    assert summary["min_ms"] == 1 and summary["max_ms"] == 100


def test_spec_rejects_unknown_fields() -> None:
    with pytest.raises(ValueError, match="min_run"):
        BenchmarkSpec(min_run=3)


@pytest.mark.timing
def test_a_cpu_burner_beside_the_benchmark_is_flagged_as_contention(tiny_model: Path) -> None:
    """The burner's CPU is counted as other processes' load, whatever share of a core it got
    (a whole one on an idle machine, half pinned to the benchmark's core, less under steal)."""
    import subprocess
    import sys

    import psutil

    from optistudio.core.machine.contention import ContentionThresholds

    spec = BenchmarkSpec(
        batch_sizes=[1], threads=1, min_runs=5, min_seconds=1.0, max_seconds=2.0, window_seconds=0.2
    )
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # let it reach full speed
        burning = psutil.Process(burner.pid)
        cpu_before, wall_before = sum(burning.cpu_times()[:2]), time.perf_counter()
        result = run_benchmark(tiny_model, spec).results[0]
        burned = sum(burning.cpu_times()[:2]) - cpu_before
        burner_cores = burned / (time.perf_counter() - wall_before)
    finally:
        burner.kill()
        burner.wait()

    contention = result.contention
    slack = 0.15  # 10 ms counter ticks, and the burner's share read over the whole call
    assert contention.other_cores >= burner_cores - slack, (burner_cores, contention)
    assert result.metric_values()["contended"] == float(contention.contended)
    if burner_cores > ContentionThresholds().other_cores + slack:
        assert contention.contended, (burner_cores, contention)
        assert any("other processes" in reason for reason in contention.reasons)


def test_cpu_affinity_pins_the_run_and_is_recorded(tiny_model: Path) -> None:
    import os

    before = os.sched_getaffinity(0)
    spec = BenchmarkSpec(batch_sizes=[1], cpu_affinity=[0], **QUICK)

    report = run_benchmark(tiny_model, spec)

    assert report.environment["affinity"] == [0]
    assert os.sched_getaffinity(0) == before


def test_unknown_core_is_refused_with_the_valid_ones(tiny_model: Path) -> None:
    with pytest.raises(InvalidSpec, match="not available here. Valid cores"):
        run_benchmark(tiny_model, BenchmarkSpec(cpu_affinity=[4096], **QUICK))
