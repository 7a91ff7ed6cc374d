"""Paired, interleaved comparison of two models: the B-over-A latency ratio with a bootstrap CI.

Design. Pair i is one run of A and one run of B, back to back in one process. The order
alternates (A B, B A, A B, ...: A B B A A B B A as a stream, "ABBA"), so a warm-cache or
turbo advantage of whichever runs second falls on A and B equally often.

Estimate. r_i = t_B,i / t_A,i and the estimate is median(r_1..r_n). Noise that hits both
members of a pair (a neighbour process, a frequency change, thermal drift) multiplies t_A,i and
t_B,i alike and cancels in r_i, which is why the ratio is far more stable than either absolute
latency. The median ignores the occasional pair where a stall hit only one member.

Interval. Percentile bootstrap over pairs: draw R resamples of n pair indices with replacement
(one seeded numpy Generator, an R x n index matrix), take the median ratio of each, and report
CI = (q_{alpha/2}, q_{1-alpha/2}) of those R medians, alpha = 1 - confidence. Since the sorted
ratios are monotone in their rank, the median of a resample is read off the sorted ratios at the
median resampled rank, so only small integers are ordered.

Verdict. With a practical margin m (ComparisonSpec.min_effect, 2 % by default): CI entirely
below 1 - m: "faster" (B takes less time than A); entirely above 1 + m: "slower"; otherwise
"no significant difference", and no winner is named. The margin matters because a fast model
timed for seconds yields tens of thousands of pairs: the interval then gets so narrow that a
0.3 % difference between two sessions of the *same* model would otherwise crown a winner.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, model_validator

from optistudio.core.backends import LoadedModel, get_backend
from optistudio.core.backends.base import Precision
from optistudio.core.backends.target import BackendName, DeviceName, RunsOnTarget, Threads
from optistudio.core.data.batch import batch_of, declared_batch
from optistudio.core.data.inputs import (
    shapes_of,
)
from optistudio.core.data.model_inputs import ModelInputs
from optistudio.core.machine.contention import ContentionMonitor, ContentionReport
from optistudio.core.machine.environment import fingerprint
from optistudio.core.measure.stats import latency_summary
from optistudio.core.model.info import ModelInfo
from optistudio.core.model.intake import inspect_model
from optistudio.core.progress import ProgressCallback, ignore_progress

Verdict = Literal["faster", "slower", "no significant difference"]
FASTER: Verdict = "faster"
SLOWER: Verdict = "slower"
NO_DIFFERENCE: Verdict = "no significant difference"

MIN_PAIRS = 2
PROGRESS_INTERVAL_S = 0.25

Feeds = dict[str, np.ndarray]
FloatArray = npt.NDArray[np.float64]


class RatioInterval(BaseModel):
    """The median paired ratio B/A, its bootstrap interval and the verdict."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ratio: float = Field(description="Median of t_B / t_A over the pairs.")
    low: float = Field(description="Lower end of the bootstrap interval.")
    high: float = Field(description="Upper end of the bootstrap interval.")
    confidence: float = Field(description="Confidence level of the interval, e.g. 0.95.")
    pairs: int = Field(description="Number of (A, B) pairs.")
    margin: float = Field(default=0.0, description="Smallest relative difference that counts.")
    verdict: Verdict = Field(description="faster / slower (B relative to A) or no difference.")


def paired_ratio_interval(
    a_ms: Sequence[float],
    b_ms: Sequence[float],
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    margin: float = 0.0,
) -> RatioInterval:
    """Median of the pairwise ratios b/a with a percentile-bootstrap interval.

    a_ms[i] and b_ms[i] must come from the same pair (measured back to back). Raises ValueError
    for unequal lengths, fewer than 2 pairs, non-positive or non-finite latencies, or a
    confidence outside (0, 1).
    """
    _check_settings(confidence, resamples)
    ratios = np.sort(_pair_ratios(a_ms, b_ms))
    medians = _bootstrap_medians(ratios, resamples, np.random.default_rng(seed))
    alpha = 1.0 - confidence
    low, high = (float(q) for q in np.quantile(medians, [alpha / 2, 1 - alpha / 2]))
    return RatioInterval(
        ratio=float(np.median(ratios)),
        low=low,
        high=high,
        confidence=confidence,
        pairs=int(ratios.size),
        margin=margin,
        verdict=verdict_of(low, high, margin=margin),
    )


def verdict_of(low: float, high: float, *, margin: float = 0.0) -> Verdict:
    """FASTER when the interval lies below 1 - margin, SLOWER above 1 + margin, else
    NO_DIFFERENCE."""
    if high < 1.0 - margin:
        return FASTER
    if low > 1.0 + margin:
        return SLOWER
    return NO_DIFFERENCE


def straddles(low: float, high: float, margin: float) -> bool:
    """Whether the interval of B/A holds the threshold 1 - margin that "faster" must clear:
    it can then say neither "faster" nor "not faster by the margin"."""
    return low < 1.0 - margin <= high


def describe(interval: RatioInterval, *, a: str = "A", b: str = "B") -> str:
    """One sentence for people, e.g. "B takes 0.62x the time of A (95 % CI 0.60-0.64): ..."."""
    digits = _digits(interval.low, interval.high)
    level = f"{interval.confidence * 100:g} %"
    numbers = (
        f"{b} takes {interval.ratio:.{digits}f}x the time of {a} "
        f"({level} CI {interval.low:.{digits}f}-{interval.high:.{digits}f})"
    )
    if interval.verdict == NO_DIFFERENCE and (interval.high < 1.0 or interval.low > 1.0):
        return f"{numbers}: no significant difference (under the {interval.margin:.0%} margin)."
    if interval.verdict == NO_DIFFERENCE:
        return f"{numbers}: no significant difference."
    return f"{numbers}: {b} is {interval.verdict}."


def _check_settings(confidence: float, resamples: int) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, not {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, not {resamples}")


def _pair_ratios(a_ms: Sequence[float], b_ms: Sequence[float]) -> FloatArray:
    a = np.asarray(a_ms, dtype=np.float64)
    b = np.asarray(b_ms, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(
            f"A and B need one latency per pair: got {a.size} for A and {b.size} for B"
        )
    if a.size < MIN_PAIRS:
        raise ValueError(f"need at least {MIN_PAIRS} pairs to compare, got {a.size}")
    for name, values in (("A", a), ("B", b)):
        if not np.all(np.isfinite(values)) or np.any(values <= 0):
            raise ValueError(f"latencies of {name} must be positive, finite numbers")
    return b / a


def _bootstrap_medians(
    sorted_ratios: FloatArray, resamples: int, rng: np.random.Generator
) -> FloatArray:
    """The median of each of `resamples` resamples (with replacement) of the sorted ratios."""
    n = sorted_ratios.size
    lower, upper = (n - 1) // 2, n // 2
    ranks = _ordered_ranks(rng, n, resamples, (lower, upper))
    return (sorted_ratios[ranks[:, lower]] + sorted_ratios[ranks[:, upper]]) / 2


def _ordered_ranks(
    rng: np.random.Generator, n: int, resamples: int, middle: tuple[int, int]
) -> npt.NDArray[np.integer[Any]]:
    """A resamples x n matrix of ranks drawn from 0..n-1, each row ordered at least at `middle`.

    Up to 32767 pairs the ranks fit int16, which numpy sorts with a radix sort (linear, about
    3x faster than partitioning); beyond that they are int32 and only partitioned.
    """
    if n <= np.iinfo(np.int16).max:
        ranks = rng.integers(0, n, size=(resamples, n), dtype=np.int16)
        return np.sort(ranks, axis=1, kind="stable")
    ranks = rng.integers(0, n, size=(resamples, n), dtype=np.int32)
    return np.partition(ranks, list(middle), axis=1)


def _digits(low: float, high: float) -> int:
    """Two decimals, more when the interval is so narrow that two would print its ends equal."""
    for digits in (2, 3, 4):
        if f"{low:.{digits}f}" != f"{high:.{digits}f}":
            return digits
    return 4


class ComparisonSpec(ModelInputs, RunsOnTarget):
    """How to compare two models: one backend, one batch size, interleaved pairs."""

    model_config = ConfigDict(extra="forbid")
    # Two sessions share the process: an idle one must not spin and steal the other's cores.
    pinned_target: ClassVar[Mapping[str, Any]] = {"spin_wait": False}

    backend: BackendName = Field(
        default="onnxruntime", description="Inference backend for both models."
    )
    device: DeviceName = "cpu"
    candidate_backend: str | None = Field(
        default=None,
        description="Backend of B when it differs from A's (e.g. the original on ONNX Runtime "
        "against a variant on OpenVINO); empty = the same backend.",
    )
    precision: Precision = Field(
        default="fp32",
        description="Inference precision A is run at (B too unless candidate_precision says "
        "otherwise); a backend that cannot run it refuses with the precisions it can.",
    )
    candidate_precision: Precision | None = Field(
        default=None,
        description="Inference precision of B when it differs from A's (e.g. a variant at "
        "OpenVINO's bf16 against the original in fp32); empty = A's.",
    )
    batch_size: int | None = Field(
        default=None,
        ge=1,
        description="Batch size of every run (of the inputs without a shape); empty = the "
        "batch the model declares fixed, else 1.",
    )
    threads: Threads = None
    warmup_runs: int = Field(
        default=5, ge=0, le=10_000, description="Untimed runs of each model first."
    )
    min_pairs: int = Field(
        default=30, ge=MIN_PAIRS, le=1_000_000, description="Least (A, B) pairs to time."
    )
    min_seconds: float = Field(default=2.0, ge=0, le=3600, description="Least timed seconds.")
    max_seconds: float = Field(
        default=30.0, gt=0, le=3600, description="Stop after this long even below min_pairs."
    )
    confidence: float = Field(
        default=0.95, ge=0.5, le=0.999, description="Confidence level of the interval."
    )
    resamples: int = Field(
        default=2000, ge=100, le=100_000, description="Bootstrap resamples for the interval."
    )
    seed: int = Field(default=0, description="Seed of the synthetic inputs and the bootstrap.")
    min_effect: float = Field(
        default=0.02,
        ge=0,
        le=0.5,
        description="Differences smaller than this share are reported as no significant "
        "difference, however narrow the interval (0.02 = 2 %).",
    )

    @model_validator(mode="after")
    def _check(self) -> ComparisonSpec:
        if self.max_seconds < self.min_seconds:
            raise ValueError(
                f"max_seconds must be at least min_seconds ({self.max_seconds:g} s < "
                f"{self.min_seconds:g} s): lower min_seconds with it, or raise max_seconds"
            )
        return self


class Comparison(BaseModel):
    """The result of one paired comparison of B against A."""

    model_config = ConfigDict(extra="forbid")

    ratio: float = Field(description="Median of t_B / t_A over the pairs.")
    low: float = Field(description="Lower end of the interval of the ratio.")
    high: float = Field(description="Upper end of the interval of the ratio.")
    confidence: float
    margin: float = 0.0
    verdict: Verdict
    pairs: int
    duration_s: float = Field(description="Seconds spent timing pairs (after warm-up).")
    a_p50_ms: float
    b_p50_ms: float
    a_summary: dict[str, float] = Field(
        description="optistudio.core.measure.stats.latency_summary of A."
    )
    b_summary: dict[str, float] = Field(
        description="optistudio.core.measure.stats.latency_summary of B."
    )
    batch_size: int
    threads: int
    environment: dict[str, Any]
    sentence: str = Field(description="The result in one sentence (see describe()).")
    contention: ContentionReport | None = Field(
        default=None, description="What other processes did to the machine during the pairs."
    )

    def interval(self) -> RatioInterval:
        """The ratio, interval and verdict alone."""
        return RatioInterval(
            ratio=self.ratio,
            low=self.low,
            high=self.high,
            confidence=self.confidence,
            pairs=self.pairs,
            margin=self.margin,
            verdict=self.verdict,
        )


def compare_models(
    path_a: Path,
    path_b: Path,
    spec: ComparisonSpec,
    *,
    info_a: ModelInfo | None = None,
    info_b: ModelInfo | None = None,
    progress: ProgressCallback | None = None,
) -> Comparison:
    """Load both models on the spec's backend and compare them pair by pair (B over A).

    Each model gets inputs synthesized from its own input specs with the same seed, so an FP16
    variant is fed FP16 data of the same shapes (and the spec's arrays in its own dtypes).
    """
    report = progress or ignore_progress
    feeds_a, feeds_b, spec = pair_feeds(path_a, path_b, spec, info_a=info_a, info_b=info_b)
    backend_b = spec.candidate_backend or spec.backend
    where = spec.backend if backend_b == spec.backend else f"{spec.backend} (A), {backend_b} (B)"
    report(0.0, f"Loading both models on {where} ({spec.device})")
    with loaded_pair(path_a, path_b, spec) as (model_a, model_b):
        return compare_loaded(model_a, model_b, feeds_a, feeds_b, spec, progress=report)


def pair_feeds(
    path_a: Path,
    path_b: Path,
    spec: ComparisonSpec,
    *,
    info_a: ModelInfo | None = None,
    info_b: ModelInfo | None = None,
) -> tuple[Feeds, Feeds, ComparisonSpec]:
    """A's and B's inputs (the same arrays, each in its own dtypes) and the spec at the batch
    size they have."""
    info_a = info_a or inspect_model(path_a)
    arrays = spec.arrays(info_a.inputs)
    shapes = {**spec.shapes, **shapes_of(arrays)}
    asked = spec.batch_size or declared_batch(info_a.inputs, shapes, spec.batch_axes)
    batch = batch_of(info_a.inputs, shapes, asked, spec.batch_axes)
    spec = spec.model_copy(update={"batch_size": batch})
    feeds_a = _feeds(info_a, spec, arrays)
    feeds_b = _feeds(info_b or inspect_model(path_b), spec, arrays)
    return feeds_a, feeds_b, spec


@contextmanager
def loaded_pair(
    path_a: Path, path_b: Path, spec: ComparisonSpec
) -> Iterator[tuple[LoadedModel, LoadedModel]]:
    """A on the spec's backend and precision, B on its candidate's; both closed on exit."""
    options = spec.run_target.session_options()
    options_b = options.model_copy(update={"precision": spec.candidate_precision or spec.precision})
    with ExitStack() as loaded:
        model_a = get_backend(spec.backend).load(path_a, options)
        loaded.callback(model_a.close)
        model_b = get_backend(spec.candidate_backend or spec.backend).load(path_b, options_b)
        loaded.callback(model_b.close)
        yield model_a, model_b


def compare_loaded(
    model_a: LoadedModel,
    model_b: LoadedModel,
    feeds_a: Feeds,
    feeds_b: Feeds,
    spec: ComparisonSpec,
    *,
    progress: ProgressCallback | None = None,
) -> Comparison:
    """Warm both models, then time interleaved pairs until the spec's minimums (or cap) are met.

    Progress is reported about every PROGRESS_INTERVAL_S; a Cancelled raised by it propagates.
    """
    report = progress or ignore_progress
    report(0.0, "Warming up both models")
    for _ in range(spec.warmup_runs):
        model_a.run(feeds_a)
        model_b.run(feeds_b)
    monitor = ContentionMonitor()
    monitor.start()
    a_ms, b_ms, duration = _timed_pairs((model_a, feeds_a), (model_b, feeds_b), spec, report)
    contention = monitor.stop()
    interval = paired_ratio_interval(
        a_ms,
        b_ms,
        confidence=spec.confidence,
        resamples=spec.resamples,
        seed=spec.seed,
        margin=spec.min_effect,
    )
    report(1.0, "Done")
    comparison = _comparison(interval, a_ms, b_ms, duration, model_a, spec)
    return comparison.model_copy(update={"contention": contention})


def _feeds(info: ModelInfo, spec: ComparisonSpec, arrays: Feeds) -> Feeds:
    dtypes = {tensor.name: tensor.dtype for tensor in info.inputs}
    own = {name: array.astype(dtypes.get(name, array.dtype)) for name, array in arrays.items()}
    feeds, _warnings = spec.feeds(
        info.inputs, batch_size=spec.batch_size, seed=spec.seed, arrays=own
    )
    return feeds


def _timed_pairs(
    side_a: tuple[LoadedModel, Feeds],
    side_b: tuple[LoadedModel, Feeds],
    spec: ComparisonSpec,
    report: ProgressCallback,
) -> tuple[list[float], list[float], float]:
    """Latencies (ms) of A and B, pair by pair in ABBA order, and the seconds it took."""
    a_ms: list[float] = []
    b_ms: list[float] = []
    start = time.perf_counter()
    next_report = start + PROGRESS_INTERVAL_S
    while True:
        a_first = len(a_ms) % 2 == 0
        first, second = (side_a, side_b) if a_first else (side_b, side_a)
        t_first, t_second = time_run(*first), time_run(*second)
        a_ms.append(t_first if a_first else t_second)
        b_ms.append(t_second if a_first else t_first)
        now = time.perf_counter()
        if _finished(len(a_ms), now - start, spec):
            return a_ms, b_ms, now - start
        if now >= next_report:
            report(_share_done(len(a_ms), now - start, spec), f"Timing pair {len(a_ms)}")
            next_report = now + PROGRESS_INTERVAL_S


def time_run(model: LoadedModel, feeds: Feeds) -> float:
    """Wall milliseconds of one run."""
    clock = time.perf_counter_ns
    t0 = clock()
    model.run(feeds)
    return (clock() - t0) / 1e6


def _finished(pairs: int, elapsed: float, spec: ComparisonSpec) -> bool:
    if pairs < MIN_PAIRS:
        return False
    enough = pairs >= spec.min_pairs and elapsed >= spec.min_seconds
    return enough or elapsed >= spec.max_seconds


def _share_done(pairs: int, elapsed: float, spec: ComparisonSpec) -> float:
    towards_minimum = min(pairs / spec.min_pairs, elapsed / max(spec.min_seconds, 1e-9), 1.0)
    return min(0.99, max(towards_minimum * 0.9, elapsed / spec.max_seconds))


def _comparison(
    interval: RatioInterval,
    a_ms: list[float],
    b_ms: list[float],
    duration: float,
    model_a: LoadedModel,
    spec: ComparisonSpec,
) -> Comparison:
    a_summary, b_summary = latency_summary(a_ms), latency_summary(b_ms)
    return Comparison(
        **interval.model_dump(),
        duration_s=duration,
        a_p50_ms=a_summary["p50_ms"],
        b_p50_ms=b_summary["p50_ms"],
        a_summary=a_summary,
        b_summary=b_summary,
        batch_size=spec.batch_size or 1,  # feeds made without pair_feeds: the old default
        threads=int(model_a.details.get("threads") or spec.threads or 0),
        environment=fingerprint(threads=spec.threads),
        sentence=describe(interval),
    )
