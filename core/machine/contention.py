"""Contention: was the machine shared while a benchmark ran?

A latency figure taken while another process burns a core, or while the hypervisor steals time,
is not the model's speed. The monitor samples CPU counters during a run and flags it.

Over the interval from `start()` to `stop()` (wall seconds `W`):

* machine busy CPU-seconds `B` = delta of (total - idle - iowait - steal) jiffies from the
  aggregate ``cpu`` line of /proc/stat, divided by ``os.sysconf("SC_CLK_TCK")``. Steal is left
  out of `B` because stolen time is accounted as steal, not as work of any process here; it is
  reported on its own (below) rather than counted twice as "other processes".
* own CPU-seconds `O` = delta of ``time.process_time()``: user + system time of every thread of
  this process, which includes the runtime's intra-/inter-op thread pools. Child processes are not
  added: the kernel credits a child's whole lifetime to its parent only when it is reaped, so
  over an interval that figure is wrong, not just late.
* other-process load in cores = max(0, B - O) / W; as a share of the machine:
  other_cores / usable cores, where usable = ``len(os.sched_getaffinity(0))`` (else
  ``os.cpu_count()``).
* steal share = delta steal / delta total (total = user + nice + system + idle + iowait + irq +
  softirq + steal; guest time is already inside user and nice).
* frequency = ``psutil.cpu_freq(percpu=True)`` current MHz, min / max / mean over every CPU and
  every sample.
* the 1-minute load average (``os.getloadavg``) is context only: it is smoothed over a minute
  and counts the benchmark itself, so it never decides anything.

Unavailable metrics are None, never an exception: steal_share where the OS has no steal counter
(non-Linux), frequencies where the OS does not expose them (many VMs and containers), the load
average on Windows. Where /proc/stat is unreadable, B comes from ``psutil.cpu_times()``.

Counters tick at CLK_TCK (usually 100 Hz) per CPU, so other_cores has a resolution of about
``cpus / (CLK_TCK * W)`` cores: fine for a run of a second or more, noisy for 50 ms.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

import psutil
from pydantic import BaseModel, ConfigDict, Field

logger = logging.getLogger(__name__)

PROC_STAT = "/proc/stat"


class ContentionThresholds(BaseModel):
    """When a run counts as taken under contention."""

    model_config = ConfigDict(extra="forbid")

    other_cores: float = Field(
        default=0.25,
        ge=0,
        description="Flag the run when other processes used more than this many cores on "
        "average during it.",
    )
    steal_share: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="Flag the run when the hypervisor stole more than this share of CPU time.",
    )
    freq_variation: float = Field(
        default=0.25,
        ge=0,
        le=1,
        description="Mention frequency in the reasons when (max - min) / max exceeds this. "
        "Never flags the run by itself: turbo boost and idle down-clocking move the frequency "
        "on an otherwise quiet machine.",
    )


class ContentionReport(BaseModel):
    """What the machine was doing besides the benchmark, and whether that spoils the figures."""

    model_config = ConfigDict(extra="forbid")

    wall_s: float = Field(description="Wall-clock seconds between start and stop.")
    other_cores: float = Field(description="Average cores used by other processes.")
    other_share: float = Field(description="other_cores as a share of the usable cores.")
    steal_share: float | None = Field(
        description="Share of CPU time stolen by the hypervisor; None where not exposed."
    )
    load_avg_1m: float | None = Field(
        description="1-minute load average at stop (context only); None where not exposed."
    )
    freq_mhz_min: float | None = Field(description="Lowest CPU frequency seen, MHz.")
    freq_mhz_max: float | None = Field(description="Highest CPU frequency seen, MHz.")
    freq_mhz_mean: float | None = Field(description="Mean CPU frequency over CPUs and samples.")
    samples: int = Field(description="Counter snapshots taken, start and stop included.")
    contended: bool = Field(description="True when the run was taken under contention.")
    reasons: list[str] = Field(description="Plain-English findings, contention first.")


@dataclass(frozen=True)
class _Snapshot:
    wall_s: float
    own_cpu_s: float
    busy_s: float
    total_s: float
    steal_s: float | None


@dataclass
class _FrequencyRange:
    """Running min / max / mean of frequencies in MHz; None until one is seen."""

    low: float | None = None
    high: float | None = None
    total: float = 0.0
    count: int = 0

    def add(self, freqs: Sequence[float]) -> None:
        if not freqs:
            return
        self.low = min(freqs) if self.low is None else min(self.low, *freqs)
        self.high = max(freqs) if self.high is None else max(self.high, *freqs)
        self.total += sum(freqs)
        self.count += len(freqs)

    def extremes(self) -> list[float]:
        return [] if self.low is None or self.high is None else [self.low, self.high]

    def mean(self) -> float | None:
        return self.total / self.count if self.count else None


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask), else all logical CPUs."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def assess(
    other_cores: float,
    usable_cores: int,
    steal_share: float | None,
    freqs: Sequence[float],
    thresholds: ContentionThresholds | None = None,
) -> tuple[bool, list[str]]:
    """Decide whether a run was contended, with reasons. Pure: no measurement happens here.

    `freqs` are observed frequencies in MHz (the min and max are enough); empty when unknown.
    """
    limits = thresholds or ContentionThresholds()
    reasons: list[str] = []
    if other_cores > limits.other_cores:
        reasons.append(
            f"other processes used {other_cores:.1f} of {usable_cores} cores during the run "
            f"(threshold {limits.other_cores:g} core)"
        )
    if steal_share is not None and steal_share > limits.steal_share:
        reasons.append(
            f"CPU steal {steal_share * 100:.0f} % (threshold {limits.steal_share * 100:g} %)"
        )
    contended = bool(reasons)
    low, high = (min(freqs), max(freqs)) if freqs else (0.0, 0.0)
    if high > 0 and (high - low) / high > limits.freq_variation:
        reasons.append(f"CPU frequency varied {low / 1000:.1f}-{high / 1000:.1f} GHz")
    return contended, reasons


def _proc_stat_times() -> tuple[float, float, float] | None:
    """(busy, total, steal) CPU-seconds from /proc/stat, or None where it cannot be read."""
    try:
        with open(PROC_STAT, "rb") as stat:
            fields = stat.readline().split()
        ticks = [int(value) for value in fields[1:9]]
        hertz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None
    if fields[:1] != [b"cpu"] or len(ticks) < 8 or hertz <= 0:
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = ticks
    total = user + nice + system + idle + iowait + irq + softirq + steal
    return (total - idle - iowait - steal) / hertz, total / hertz, steal / hertz


def _psutil_times() -> tuple[float, float, None]:
    """(busy, total, None) CPU-seconds from psutil, for systems without /proc/stat."""
    times = psutil.cpu_times()
    fields = times._asdict()
    total = sum(fields.values()) - fields.get("guest", 0.0) - fields.get("guest_nice", 0.0)
    idle = fields.get("idle", 0.0) + fields.get("iowait", 0.0) + fields.get("steal", 0.0)
    return total - idle, total, None


def _snapshot() -> _Snapshot:
    busy, total, steal = _proc_stat_times() or _psutil_times()
    return _Snapshot(time.perf_counter(), time.process_time(), busy, total, steal)


def _frequencies_mhz() -> list[float]:
    """Current frequency of each CPU in MHz; empty where the OS does not expose it."""
    try:
        found = psutil.cpu_freq(percpu=True)
    except (OSError, NotImplementedError, AttributeError, RuntimeError):
        return []
    return [freq.current for freq in found or [] if freq.current and freq.current > 0]


def _load_avg_1m() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


class ContentionMonitor:
    """Samples CPU counters around a benchmark run and reports whether it was contended.

    Call `start()`, then `sample()` between timing windows (it reads /proc/stat, the process
    CPU clock and the CPU frequencies once: tens of microseconds), then `stop()`. Or use it as
    a context manager and read `report` afterwards. The averages come from the first and last
    snapshots; the samples in between feed the frequency range.
    """

    def __init__(self, thresholds: ContentionThresholds | None = None) -> None:
        self.thresholds = thresholds or ContentionThresholds()
        self._reset()

    def _reset(self) -> None:
        self._first: _Snapshot | None = None
        self._last: _Snapshot | None = None
        self._samples = 0
        self._freqs = _FrequencyRange()
        self._report: ContentionReport | None = None

    def start(self) -> None:
        """Take the first snapshot; anything measured before is forgotten."""
        self._reset()
        self._first = self._record()

    def sample(self) -> None:
        """Take a snapshot between timing windows. Cheap: call it as often as every window."""
        if self._first is None or self._report is not None:
            raise RuntimeError("ContentionMonitor.sample() called outside start() ... stop()")
        self._record()

    def stop(self) -> ContentionReport:
        """Take the last snapshot and build the report."""
        self.sample()
        self._report = self._build_report()
        return self._report

    @property
    def report(self) -> ContentionReport:
        """The report of a stopped monitor."""
        if self._report is None:
            raise RuntimeError("ContentionMonitor has no report before stop()")
        return self._report

    def __enter__(self) -> ContentionMonitor:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _record(self) -> _Snapshot:
        self._last = _snapshot()
        self._samples += 1
        self._freqs.add(_frequencies_mhz())
        return self._last

    def _build_report(self) -> ContentionReport:
        assert self._first is not None and self._last is not None
        first, last = self._first, self._last
        wall = max(last.wall_s - first.wall_s, 1e-9)
        busy = last.busy_s - first.busy_s
        other_cores = max(0.0, busy - (last.own_cpu_s - first.own_cpu_s)) / wall
        cores = usable_cores()
        steal_share = _steal_share(first, last)
        freqs = self._freqs
        contended, reasons = assess(
            other_cores, cores, steal_share, freqs.extremes(), self.thresholds
        )
        if contended:
            logger.info("run taken under contention: %s", "; ".join(reasons))
        return ContentionReport(
            wall_s=wall,
            other_cores=other_cores,
            other_share=other_cores / cores,
            steal_share=steal_share,
            load_avg_1m=_load_avg_1m(),
            freq_mhz_min=freqs.low,
            freq_mhz_max=freqs.high,
            freq_mhz_mean=freqs.mean(),
            samples=self._samples,
            contended=contended,
            reasons=reasons,
        )


def _steal_share(first: _Snapshot, last: _Snapshot) -> float | None:
    total = last.total_s - first.total_s
    if first.steal_s is None or last.steal_s is None or total <= 0:
        return None
    return max(0.0, last.steal_s - first.steal_s) / total
