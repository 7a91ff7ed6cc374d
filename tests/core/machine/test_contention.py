from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import psutil
import pytest
from pydantic import ValidationError

from optistudio.core.machine import contention
from optistudio.core.machine.contention import (
    ContentionMonitor,
    ContentionReport,
    ContentionThresholds,
    _Snapshot,
    assess,
    usable_cores,
)


@contextmanager
def cpu_burner(cores: int = 1) -> Iterator[list[psutil.Process]]:
    """Run `cores` busy-looping Python processes until the block ends; they are always killed.
    Yields them, so a test can read how much CPU they really got (`cpu_seconds`)."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        for burner in burners:
            _wait_until_burning(burner)
        yield [psutil.Process(burner.pid) for burner in burners]
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


def _wait_until_burning(burner: subprocess.Popen[bytes], cpu_s: float = 0.05) -> None:
    """Block until the burner has used some CPU, so the measured window sees it at full speed."""
    process = psutil.Process(burner.pid)
    deadline = time.monotonic() + 30
    while process.cpu_times().user < cpu_s:
        assert burner.poll() is None, "the CPU burner exited early"
        assert time.monotonic() < deadline, "the CPU burner never started burning"
        time.sleep(0.01)


def spin_like_a_benchmark(monitor: ContentionMonitor, seconds: float) -> None:
    """Busy-loop in this process, sampling between ~0.5 s windows as the engine does."""
    end = time.perf_counter() + seconds
    next_sample = time.perf_counter() + 0.5
    while (now := time.perf_counter()) < end:
        if now >= next_sample:
            monitor.sample()
            next_sample = now + 0.5


def cpu_seconds(processes: list[psutil.Process]) -> float:
    """User + system CPU seconds the processes have used so far."""
    return sum(sum(process.cpu_times()[:2]) for process in processes)


TICKS = 0.15
"""Cores of slack between two CPU counters of 10 ms ticks read over a second or so."""


@pytest.mark.timing
def test_a_cpu_burner_beside_the_benchmark_is_flagged() -> None:
    """The burner's CPU counts as other processes' load, whatever share of a core it got: a
    whole one on an idle machine, half of it pinned to the benchmark's core, less under steal
    or beside other load (which counts too)."""
    with cpu_burner() as burners, ContentionMonitor() as monitor:
        burned = -cpu_seconds(burners)
        spin_like_a_benchmark(monitor, 1.5)
        burned += cpu_seconds(burners)

    report = monitor.report
    burner_cores = burned / report.wall_s
    assert report.other_cores >= burner_cores - TICKS, (burner_cores, report)
    if burner_cores > ContentionThresholds().other_cores + TICKS:
        assert report.contended, (burner_cores, report)
        assert any("other processes" in reason for reason in report.reasons), report.reasons


def hash_in_threads(seconds: float, threads: int) -> None:
    """Keep `threads` threads of this process busy (hashlib releases the GIL), like a runtime's
    intra-op thread pool."""
    block = b"x" * (1 << 20)

    def work(_: int) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            hashlib.sha256(block).digest()

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, range(threads)))


@pytest.mark.timing
def test_the_benchmarks_own_threads_are_not_counted_as_other() -> None:
    own = psutil.Process()
    cpu_before = own.cpu_times()
    with ContentionMonitor() as monitor:
        hash_in_threads(1.0, threads=usable_cores())
    cpu_after = own.cpu_times()

    report = monitor.report
    own_cpu_s = sum(cpu_after[:2]) - sum(cpu_before[:2])  # user + system, every thread
    own_cores = own_cpu_s / report.wall_s
    # Other sessions may share this machine, so "other" cannot be expected to be ~0. But our
    # threads and everyone else together cannot use more cores than the machine has: had our
    # work been counted as "other" too, the sum would exceed it by our own share. Counter ticks
    # are 10 ms, hence the tolerance; below twice that our share would not show.
    tolerance = 0.1
    if own_cores < 2 * tolerance:
        pytest.skip(f"machine too busy: our threads got only {own_cores:.2f} core")
    assert report.other_cores + own_cores <= (os.cpu_count() or 1) + tolerance, (
        own_cores,
        report,
    )


def test_report_arithmetic(monkeypatch: pytest.MonkeyPatch) -> None:
    snapshots = iter(
        [
            _Snapshot(wall_s=10.0, own_cpu_s=5.0, busy_s=100.0, total_s=400.0, steal_s=1.0),
            _Snapshot(wall_s=12.0, own_cpu_s=8.0, busy_s=104.0, total_s=404.0, steal_s=1.4),
        ]
    )
    monkeypatch.setattr(contention, "_snapshot", lambda: next(snapshots))
    monkeypatch.setattr(contention, "_frequencies_mhz", lambda: [1000.0, 3000.0])
    monkeypatch.setattr(contention, "usable_cores", lambda: 2)

    with ContentionMonitor() as monitor:
        pass
    report = monitor.report

    # busy 4 s - own 3 s over 2 s wall = 0.5 core; steal 0.4 s of 4 s total = 10 %.
    assert report.wall_s == pytest.approx(2.0)
    assert report.other_cores == pytest.approx(0.5)
    assert report.other_share == pytest.approx(0.25)
    assert report.steal_share == pytest.approx(0.1)
    assert (report.freq_mhz_min, report.freq_mhz_max, report.freq_mhz_mean) == (
        1000.0,
        3000.0,
        2000.0,
    )
    assert report.samples == 2
    assert report.contended
    assert [reason.split()[0] for reason in report.reasons] == ["other", "CPU", "CPU"]


@pytest.mark.parametrize(
    ("other_cores", "steal_share", "freqs", "contended", "phrases"),
    [
        pytest.param(0.1, 0.0, [], False, [], id="quiet"),
        pytest.param(0.3, 0.0, [], True, ["other processes used 0.3 of 2 cores"], id="busy"),
        pytest.param(0.1, 0.07, [], True, ["CPU steal 7 % (threshold 5 %)"], id="steal"),
        pytest.param(0.1, None, [], False, [], id="steal-unknown"),
        pytest.param(
            0.1, 0.0, [1200.0, 3400.0], False, ["varied 1.2-3.4 GHz"], id="turbo-not-flagged"
        ),
        pytest.param(0.1, 0.0, [3000.0, 3400.0], False, [], id="small-freq-change-silent"),
    ],
)
def test_assess_applies_the_thresholds(
    other_cores: float,
    steal_share: float | None,
    freqs: list[float],
    contended: bool,
    phrases: list[str],
) -> None:
    flagged, reasons = assess(other_cores, 2, steal_share, freqs, ContentionThresholds())

    assert flagged is contended
    assert len(reasons) == len(phrases)
    for phrase, reason in zip(phrases, reasons, strict=True):
        assert phrase in reason


def test_custom_thresholds_move_the_line() -> None:
    strict = ContentionThresholds(other_cores=0.05)

    assert assess(0.1, 2, None, [], strict)[0]
    assert not assess(0.1, 2, None, [], ContentionThresholds())[0]


def test_thresholds_reject_unknown_fields() -> None:
    with pytest.raises(ValidationError, match="other_core"):
        ContentionThresholds.model_validate({"other_core": 0.5})


def test_every_sample_is_counted() -> None:
    monitor = ContentionMonitor()
    monitor.start()
    for _ in range(100):
        monitor.sample()
    report = monitor.stop()

    assert report.samples >= 100


def test_sampling_outside_a_run_is_a_bug() -> None:
    monitor = ContentionMonitor()

    with pytest.raises(RuntimeError):
        monitor.sample()
    with pytest.raises(RuntimeError):
        _ = monitor.report


def test_report_round_trips_through_json() -> None:
    with ContentionMonitor() as monitor:
        monitor.sample()
    report = monitor.report

    assert ContentionReport.model_validate_json(report.model_dump_json()) == report
    assert ContentionReport.model_validate(report.model_dump()) == report


def test_missing_metrics_become_none_not_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_frequency(percpu: bool = False) -> None:
        raise NotImplementedError

    monkeypatch.setattr(contention, "PROC_STAT", "/nonexistent/proc/stat")
    monkeypatch.setattr(contention.psutil, "cpu_freq", no_frequency)

    with ContentionMonitor() as monitor:
        monitor.sample()
    report = monitor.report

    assert report.steal_share is None
    assert report.freq_mhz_min is None and report.freq_mhz_mean is None
    assert report.other_cores >= 0
