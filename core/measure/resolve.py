"""More interleaved rounds until a comparison resolves against the effect threshold, or a cap.

Question. Auto takes a variant only when it is faster than the original by the practical
margin m: the first look's interval of B/A (optistudio.core.measure.compare) must end below
1 - m. When it straddles 1 - m (low < 1 - m <= high) that look cannot say "faster" nor "not
faster by the margin"; `resolve_models` times more rounds until it can, or until a cap.

Rounds. A round is k interleaved pairs of runs of A and B, in the first look's ABBA order
carried on from round to round, k = ceil(ROUND_S / (p50_A + p50_B)) (at least one; the p50s
from the warm-up). Round j gives r_j = the median over its pairs of t_B / t_A: a load that hits
both members of a pair cancels in its ratio, and the median drops a pair where a stall hit
only one. Pairs, not blocks of one model's runs then the other's: a block pair is tens of
milliseconds apart, and a neighbour's load changes on that scale (measured beside a load
average of 10 on 2 cores, a one-thread model against itself: round ratios 0.978-1.186 between
the 5th and 95th percentile with 50-ms blocks, 0.996-1.000 with pair rounds). When the machine
is busy (other processes use more than the contention threshold during a short idle probe
first: optistudio.core.machine.contention), both models are loaded again on one thread: a
one-thread run never waits on a pool thread that shares a core with the neighbour, so its
times hold still where a multi-thread run's do not; the rounds then measure the one-thread
ratio, and the note says so.

Interval. Distribution-free, of the median theta of the round ratios, from order statistics
(optistudio.core.measure.stats.median_interval): with n independent rounds, #{r_j < theta} is
Binomial(n, 1/2), so P(r_(k) <= theta <= r_(n+1-k)) = 1 - 2 B(k - 1), B its CDF; the largest k
with 2 B(k - 1) <= alpha' gives confidence 1 - alpha'.

Looks. Stopping at the first of many looks whose interval resolves would spend the error rate
again at every look. Looks are taken at LOOK_ROUNDS (12, 24, 48, 96, 192 rounds) and once when
the cap stops the rounds: at most K = LOOKS = 6, each at confidence 1 - alpha / K, alpha =
1 - the comparison's confidence (Bonferroni). Then P(any look's interval misses theta) <= alpha,
so the interval at whichever look the rounds stop at is a (1 - alpha) interval although the
stop was chosen by looking, and it is reported as such (the "95 % CI"). A false "faster"
(theta >= 1 - m, yet the interval ends below 1 - m) needs a miss on the upper side: at most
alpha / 2 over all looks, at most alpha with the first look's own alpha / 2. At 12 rounds
(alpha = 0.05, alpha / K = 0.0083, k = 2) "faster" needs 11 of the 12 round ratios below 1 - m;
8 rounds are the fewest any interval exists for (k = 1: all of them).

Resolved: the interval lies below 1 - m ("faster") or at or above it ("not faster by the
margin"). Cap: a round starts only while the seconds spent (probe, loading and warm-up
included) are under the cap, so the rounds end by the cap plus one round.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.backends import LoadedModel
from optistudio.core.machine.contention import (
    ContentionMonitor,
    ContentionReport,
    ContentionThresholds,
    usable_cores,
)
from optistudio.core.measure.compare import (
    FASTER,
    PROGRESS_INTERVAL_S,
    ComparisonSpec,
    Feeds,
    RatioInterval,
    loaded_pair,
    pair_feeds,
    straddles,
    time_run,
    verdict_of,
)
from optistudio.core.measure.stats import median_interval
from optistudio.core.model.info import ModelInfo
from optistudio.core.progress import ProgressCallback, ignore_progress

LOOK_ROUNDS = (12, 24, 48, 96, 192)
LOOKS = len(LOOK_ROUNDS) + 1
"""The scheduled looks and the one at the cap: the Bonferroni divisor."""
ROUND_S = 0.1
PROBE_S = 0.2
"""Seconds of the idle probe that tells whether other processes keep the machine busy."""

Side = tuple[LoadedModel, Feeds]


class Resolution(BaseModel):
    """The rounds timed after a first look that straddled the threshold, and what they say."""

    model_config = ConfigDict(extra="forbid")

    rounds: int = Field(description="Rounds timed (interleaved pairs of A and B each).")
    seconds: float = Field(
        description="Seconds from the start (probe, loading, warm-up) to the end of the last round."
    )
    cap_s: float = Field(description="The cap: no round starts after this many seconds.")
    longest_round_s: float = Field(default=0.0, description="The longest round, seconds.")
    threads: int | None = Field(description="Threads each model ran on; None: the backend's.")
    busy: str = Field(
        default="", description="Why the machine counted busy (one-thread rounds); '' quiet."
    )
    margin: float = Field(description="The practical margin m of the threshold 1 - m.")
    interval: RatioInterval | None = Field(
        description="The last look's median round ratio, its interval (see the module "
        "docstring) and verdict; None when the rounds reached no look."
    )
    a_p50_ms: float | None = Field(default=None, description="Median of A's round medians.")
    b_p50_ms: float | None = Field(default=None, description="Median of B's round medians.")

    @property
    def resolved(self) -> bool:
        """The interval lies wholly on one side of 1 - margin."""
        found = self.interval
        return found is not None and not straddles(found.low, found.high, self.margin)

    def note(self) -> str:
        """'resolved after 12 more rounds on one thread beside the machine's load:
        faster' or 'still unresolved after the 20 s cap (41 more rounds)'."""
        where = " on one thread beside the machine's load" if self.busy else ""
        if not self.resolved:
            return f"still unresolved after the {self.cap_s:g} s cap ({self.rounds} more rounds{where})"
        assert self.interval is not None
        outcome = (
            "faster"
            if self.interval.verdict == FASTER
            else f"not faster by the {self.margin * 100:g} % margin"
        )
        return f"resolved after {self.rounds} more rounds{where}: {outcome}"


def resolve_models(
    path_a: Path,
    path_b: Path,
    spec: ComparisonSpec,
    *,
    cap_s: float,
    info_a: ModelInfo | None = None,
    info_b: ModelInfo | None = None,
    progress: ProgressCallback | None = None,
) -> Resolution:
    """Time rounds of A and B (loaded as `compare_models` loads them, on one thread when the
    machine is busy) until their interval resolves or `cap_s` seconds; see the module
    docstring."""
    started = time.perf_counter()
    busy = machine_busy()
    threads = 1 if busy else spec.threads
    spec = spec.model_copy(update={"threads": threads})
    feeds_a, feeds_b, spec = pair_feeds(path_a, path_b, spec, info_a=info_a, info_b=info_b)
    with loaded_pair(path_a, path_b, spec) as (model_a, model_b):
        return resolve_loaded(
            model_a,
            model_b,
            feeds_a,
            feeds_b,
            spec,
            cap_s=cap_s,
            started=started,
            busy=busy,
            progress=progress,
        )


def machine_busy(seconds: float = PROBE_S) -> str:
    """Why other processes make the machine busy now (a probe of `seconds` while this one
    waits), or '' when they do not."""
    monitor = ContentionMonitor()
    monitor.start()
    time.sleep(seconds)
    return busy_reason(monitor.stop())


def busy_reason(report: ContentionReport) -> str:
    """'other processes used 1.0 of 2 cores' or 'CPU steal 12 %'; '' when not contended."""
    if not report.contended:
        return ""
    if report.other_cores > ContentionThresholds().other_cores:
        return f"other processes used {report.other_cores:.1f} of {usable_cores()} cores"
    return f"CPU steal {(report.steal_share or 0.0) * 100:.0f} %"


def resolve_loaded(
    model_a: LoadedModel,
    model_b: LoadedModel,
    feeds_a: Feeds,
    feeds_b: Feeds,
    spec: ComparisonSpec,
    *,
    cap_s: float,
    started: float | None = None,
    busy: str = "",
    progress: ProgressCallback | None = None,
) -> Resolution:
    """Warm both, then time rounds until a look resolves or `cap_s` seconds since `started`
    (now when None) have passed. A Cancelled raised by `progress` propagates."""
    report = progress or ignore_progress
    start = time.perf_counter() if started is None else started
    p50_a = _warm(model_a, feeds_a, spec.warmup_runs)
    p50_b = _warm(model_b, feeds_b, spec.warmup_runs)
    rounds = _Rounds(spec, cap_s, pairs=max(1, math.ceil(ROUND_S * 1000 / (p50_a + p50_b))))
    next_report = time.perf_counter() + PROGRESS_INTERVAL_S
    while time.perf_counter() - start < cap_s:
        rounds.time_one((model_a, feeds_a), (model_b, feeds_b))
        if rounds.look_due() and rounds.look():
            break
        if time.perf_counter() >= next_report:
            report(min((time.perf_counter() - start) / cap_s, 0.99), f"round {rounds.count}")
            next_report = time.perf_counter() + PROGRESS_INTERVAL_S
    if not rounds.resolved():
        rounds.look()  # the look at the cap
    ended = (rounds.ended_at or time.perf_counter()) - start
    threads = int(model_a.details.get("threads") or 0) or spec.threads
    return rounds.resolution(seconds=ended, threads=threads, busy=busy)


class _Rounds:
    """The ratios and medians of the rounds timed so far and the looks taken at them."""

    def __init__(self, spec: ComparisonSpec, cap_s: float, *, pairs: int) -> None:
        self.spec, self.cap_s, self.pairs = spec, cap_s, pairs
        self.ratios: list[float] = []
        self.a_ms: list[float] = []
        self.b_ms: list[float] = []
        self.pairs_timed = 0
        self.longest = 0.0
        self.ended_at: float | None = None
        self.looked_at = 0
        self.interval: RatioInterval | None = None

    @property
    def count(self) -> int:
        return len(self.ratios)

    def time_one(self, side_a: Side, side_b: Side) -> None:
        """One round of `pairs` pairs, A first in even pairs and B first in odd ones."""
        began = time.perf_counter()
        a_ms, b_ms = [], []
        for _ in range(self.pairs):
            a_first = self.pairs_timed % 2 == 0
            first, second = (side_a, side_b) if a_first else (side_b, side_a)
            t_first, t_second = time_run(*first), time_run(*second)
            a_ms.append(t_first if a_first else t_second)
            b_ms.append(t_second if a_first else t_first)
            self.pairs_timed += 1
        ratios = np.asarray(b_ms) / np.maximum(np.asarray(a_ms), 1e-9)
        self.ratios.append(float(np.median(ratios)))
        self.a_ms.append(statistics.median(a_ms))
        self.b_ms.append(statistics.median(b_ms))
        self.ended_at = time.perf_counter()
        self.longest = max(self.longest, self.ended_at - began)

    def look_due(self) -> bool:
        return self.count in LOOK_ROUNDS

    def look(self) -> bool:
        """Take a look at the rounds so far (none twice at one count); whether it resolved."""
        if self.count > self.looked_at:
            self.looked_at = self.count
            self.interval = _interval(self.ratios, self.spec) or self.interval
        return self.resolved()

    def resolved(self) -> bool:
        found = self.interval
        return found is not None and not straddles(found.low, found.high, self.spec.min_effect)

    def resolution(self, *, seconds: float, threads: int | None, busy: str) -> Resolution:
        a_p50 = statistics.median(self.a_ms) if self.a_ms else None
        b_p50 = statistics.median(self.b_ms) if self.b_ms else None
        return Resolution(
            rounds=self.count,
            seconds=seconds,
            cap_s=self.cap_s,
            longest_round_s=self.longest,
            threads=threads,
            busy=busy,
            margin=self.spec.min_effect,
            interval=self.interval,
            a_p50_ms=a_p50,
            b_p50_ms=b_p50,
        )


def _interval(round_ratios: Sequence[float], spec: ComparisonSpec) -> RatioInterval | None:
    """The median round ratio and its order-statistics interval at 1 - alpha / LOOKS."""
    ratios = np.asarray(round_ratios, dtype=np.float64)
    bounds = median_interval(ratios, confidence=1.0 - (1.0 - spec.confidence) / LOOKS)
    if bounds is None:
        return None
    low, high = bounds
    return RatioInterval(
        ratio=float(np.median(ratios)),
        low=low,
        high=high,
        confidence=spec.confidence,
        pairs=int(ratios.size),
        margin=spec.min_effect,
        verdict=verdict_of(low, high, margin=spec.min_effect),
    )


def _warm(model: LoadedModel, feeds: Feeds, runs: int) -> float:
    """Median ms of `runs` warm-up runs (at least 2): what sizes the rounds."""
    return statistics.median(time_run(model, feeds) for _ in range(max(runs, 2)))
