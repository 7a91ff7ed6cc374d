"""Paired comparisons: the bootstrap interval's statistics, the ABBA loop and real ONNX runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from optistudio.core.backends import LoadedModel
from optistudio.core.errors import Cancelled
from optistudio.core.measure.compare import (
    NO_DIFFERENCE,
    SLOWER,
    ComparisonSpec,
    RatioInterval,
    _bootstrap_medians,
    compare_loaded,
    compare_models,
    describe,
    paired_ratio_interval,
    verdict_of,
)

QUICK = {"warmup_runs": 1, "min_pairs": 40, "min_seconds": 0.05, "max_seconds": 5.0}
VERDICTS = {"faster", "slower", "no significant difference"}


class Machine:
    """Load shared by the models on it: every run after `slow_after` runs is `factor` x slower."""

    def __init__(self, slow_after: int | None = None, factor: float = 3.0) -> None:
        self.runs = 0
        self.slow_after = slow_after
        self.factor = factor
        self.log: list[str] = []

    def slowdown(self) -> float:
        slow = self.slow_after is not None and self.runs >= self.slow_after
        return self.factor if slow else 1.0


class BusyModel(LoadedModel):
    """A synthetic backend: each run busy-waits `ms` times the machine's current slowdown."""

    def __init__(self, ms: float, machine: Machine, name: str = "") -> None:
        self.ms = ms
        self.machine = machine
        self.name = name
        self.details = {}

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        end = time.perf_counter() + self.ms * self.machine.slowdown() / 1000
        self.machine.runs += 1
        self.machine.log.append(self.name)
        while time.perf_counter() < end:
            pass
        return []


def simulated_pairs(
    rng: np.random.Generator, pairs: int, true_ratio: float
) -> tuple[np.ndarray, np.ndarray]:
    """Paired latencies (ms) of A and B = true_ratio * A under realistic, mostly shared noise.

    Shared by both members of a pair: a 30 % slow drift over the run and a heavy-tailed
    (Pareto) noisy-neighbour slowdown. Per run: lognormal noise (sigma 0.1) and, on 5 % of runs,
    a one-sided stall. The per-run parts are identically distributed for A and B, so the median
    of B/A is exactly true_ratio.
    """
    shared = 10.0 * np.linspace(1.0, 1.3, pairs) * (1.0 + 0.5 * rng.pareto(2.0, pairs))

    def own_noise() -> np.ndarray:
        stall = np.where(rng.random(pairs) < 0.05, 1.0 + rng.pareto(1.5, pairs), 1.0)
        return rng.lognormal(0.0, 0.1, pairs) * stall

    return shared * own_noise(), true_ratio * shared * own_noise()


def test_interval_covers_the_true_ratio_at_the_nominal_rate() -> None:
    rng = np.random.default_rng(0)
    trials, true_ratio = 1000, 0.7

    hits = 0
    for trial in range(trials):
        a, b = simulated_pairs(rng, 100, true_ratio)
        interval = paired_ratio_interval(a, b, seed=trial)
        hits += interval.low <= true_ratio <= interval.high

    # Exact 95 % coverage gives 0.95 +- 0.007 (binomial sd, 1000 trials), so 0.935 is 2 sd
    # below; a 90 % interval (0.90 +- 0.0095) sits 3.7 sd under it and fails. 100 pairs: with
    # few pairs the percentile bootstrap of a median undercovers a little (about 0.94 at 30).
    assert hits / trials >= 0.935


def test_shared_slowdown_halfway_moves_latency_but_not_the_ratio() -> None:
    rng = np.random.default_rng(1)
    a, b = simulated_pairs(rng, 200, 0.7)
    shift = np.where(np.arange(200) >= 100, 3.0, 1.0)

    interval = paired_ratio_interval(a * shift, b * shift)

    assert np.median(a[100:] * 3.0) > 2.5 * np.median(a[:100])
    assert interval.ratio == pytest.approx(0.7, rel=0.05)
    assert interval.low <= 0.7 <= interval.high
    # Unpaired, a bootstrap of median(B) / median(A) on the same data spans about 0.48-1.05.
    assert interval.high / interval.low < 1.15


@pytest.mark.parametrize("pairs", [31, 40], ids=["odd-pairs", "even-pairs"])
def test_bootstrap_medians_equal_numpy_medians_of_the_resamples(pairs: int) -> None:
    ratios = np.sort(np.random.default_rng(2).lognormal(0.0, 0.2, pairs))
    draws = np.random.default_rng(3).integers(0, pairs, size=(500, pairs), dtype=np.int16)

    medians = _bootstrap_medians(ratios, 500, np.random.default_rng(3))

    np.testing.assert_allclose(medians, np.median(ratios[draws], axis=1), rtol=1e-12)


def test_identical_distributions_show_no_significant_difference() -> None:
    rng = np.random.default_rng(4)
    a, b = simulated_pairs(rng, 500, 1.0)

    interval = paired_ratio_interval(a, b)

    assert interval.verdict == NO_DIFFERENCE
    assert interval.low < 1.0 < interval.high


@pytest.mark.timing
def test_model_compared_with_itself_shows_no_significant_difference() -> None:
    machine = Machine()
    model = BusyModel(0.3, machine)

    result = compare_loaded(model, model, {}, {}, ComparisonSpec(**QUICK))

    assert result.verdict == NO_DIFFERENCE, result.sentence
    # A busy-wait is so steady that the interval can be a hair wide and miss 1.0 by the A-then-B
    # order's overhead (1.00003-1.00033 on one CI run); what the verdict guarantees is that it
    # overlaps the margin around 1.
    assert result.low <= 1.0 + result.margin and result.high >= 1.0 - result.margin


@pytest.mark.timing
def test_twice_as_slow_variant_is_called_slower() -> None:
    machine = Machine()
    fast, slow = BusyModel(0.3, machine), BusyModel(0.6, machine)

    result = compare_loaded(fast, slow, {}, {}, ComparisonSpec(**QUICK))

    assert result.verdict == SLOWER
    assert result.ratio == pytest.approx(2.0, rel=0.1)
    assert result.sentence.endswith("B is slower.")
    assert result.b_p50_ms == pytest.approx(2 * result.a_p50_ms, rel=0.1)


@pytest.mark.timing
def test_real_runs_keep_the_ratio_through_a_shared_slowdown() -> None:
    machine = Machine(slow_after=2 + 2 * 60)  # the warm-up runs, then 60 pairs at full speed
    spec = ComparisonSpec(**{**QUICK, "min_pairs": 120})

    result = compare_loaded(BusyModel(0.4, machine), BusyModel(0.2, machine), {}, {}, spec)

    assert result.a_summary["max_ms"] > 2.5 * result.a_summary["min_ms"]
    assert result.ratio == pytest.approx(0.5, rel=0.05)


def test_pairs_alternate_order_abba() -> None:
    machine = Machine()
    a, b = BusyModel(0.05, machine, "A"), BusyModel(0.05, machine, "B")
    spec = ComparisonSpec(warmup_runs=0, min_pairs=4, min_seconds=0, max_seconds=5)

    result = compare_loaded(a, b, {}, {}, spec)

    assert result.pairs == 4
    assert "".join(machine.log) == "ABBAABBA"


@pytest.mark.timing
def test_max_seconds_caps_the_run() -> None:
    machine = Machine()
    spec = ComparisonSpec(warmup_runs=0, min_pairs=100_000, min_seconds=0, max_seconds=0.1)

    result = compare_loaded(BusyModel(1.0, machine), BusyModel(1.0, machine), {}, {}, spec)

    assert 2 <= result.pairs < 100
    assert 0.1 <= result.duration_s < 1.0


@pytest.mark.timing
def test_progress_is_reported_and_may_cancel() -> None:
    machine = Machine()
    seen: list[tuple[float, str]] = []

    def cancel_while_timing(fraction: float, message: str) -> None:
        seen.append((fraction, message))
        if message.startswith("Timing"):
            raise Cancelled("Cancelled while running.")

    spec = ComparisonSpec(warmup_runs=0, min_pairs=100_000, min_seconds=0, max_seconds=5)
    with pytest.raises(Cancelled):
        compare_loaded(
            BusyModel(1.0, machine),
            BusyModel(1.0, machine),
            {},
            {},
            spec,
            progress=cancel_while_timing,
        )

    assert seen[0] == (0.0, "Warming up both models")
    assert 0.0 < seen[-1][0] < 1.0
    assert machine.runs < 2000  # stopped within ~0.25 s, not at max_seconds


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        ([1.0, 2.0, 3.0], [1.0, 2.0], "one latency per pair"),
        ([1.0], [1.0], "at least 2 pairs"),
        ([1.0, 0.0], [1.0, 1.0], "latencies of A must be positive"),
        ([1.0, 1.0], [1.0, -2.0], "latencies of B must be positive"),
        ([1.0, float("nan")], [1.0, 1.0], "finite"),
    ],
    ids=["unequal-lengths", "one-pair", "zero-latency", "negative-latency", "nan-latency"],
)
def test_invalid_latencies_are_rejected(a: list[float], b: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        paired_ratio_interval(a, b)


@pytest.mark.parametrize(
    "kwargs", [{"confidence": 1.0}, {"confidence": 0.0}, {"resamples": 0}], ids=str
)
def test_invalid_bootstrap_settings_are_rejected(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        paired_ratio_interval([1.0, 2.0], [1.0, 2.0], **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("low", "high", "verdict"),
    [
        (0.5, 0.9, "faster"),
        (1.1, 1.3, "slower"),
        (0.9, 1.1, "no significant difference"),
        (1.0, 1.2, "no significant difference"),
    ],
    ids=["below-one", "above-one", "straddles-one", "touches-one"],
)
def test_verdict_of(low: float, high: float, verdict: str) -> None:
    assert verdict_of(low, high) == verdict


@pytest.mark.parametrize(
    ("interval", "sentence"),
    [
        (
            RatioInterval(
                ratio=0.62, low=0.6, high=0.64, confidence=0.95, pairs=50, verdict="faster"
            ),
            "B takes 0.62x the time of A (95 % CI 0.60-0.64): B is faster.",
        ),
        (
            RatioInterval(
                ratio=1.001,
                low=0.998,
                high=1.003,
                confidence=0.9,
                pairs=50,
                verdict="no significant difference",
            ),
            "B takes 1.001x the time of A (90 % CI 0.998-1.003): no significant difference.",
        ),
    ],
    ids=["faster", "narrow-no-difference"],
)
def test_describe(interval: RatioInterval, sentence: str) -> None:
    assert describe(interval) == sentence


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"min_pair": 3}, "min_pair"),
        ({"min_seconds": 5.0, "max_seconds": 1.0}, "max_seconds must be at least min_seconds"),
        ({"confidence": 0.9999}, "confidence"),
        ({"batch_size": 0}, "batch_size"),
    ],
    ids=["unknown-field", "max-below-min", "confidence-too-high", "zero-batch"],
)
def test_spec_rejects_bad_fields(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ComparisonSpec(**fields)  # type: ignore[arg-type]


def test_compare_models_on_real_onnx_models(make_model: Callable[..., Path]) -> None:
    small = make_model("small.onnx", features=16)
    large = make_model("large.onnx", features=1024)
    spec = ComparisonSpec(threads=1, warmup_runs=2, min_pairs=20, min_seconds=0.2)

    result = compare_models(small, large, spec)

    assert result.pairs >= 20
    assert result.verdict in VERDICTS
    assert result.low <= result.ratio <= result.high
    assert result.a_p50_ms > 0 and result.b_p50_ms > 0
    assert result.threads == 1 and result.batch_size == 1
    assert "onnxruntime" in result.environment["libraries"]
    assert result.interval().verdict == result.verdict


@pytest.mark.timing
def test_real_model_compared_with_itself_is_no_significant_difference(tiny_model) -> None:
    spec = ComparisonSpec(min_pairs=200, min_seconds=0.5, max_seconds=5.0, threads=1)

    comparison = compare_models(tiny_model, tiny_model, spec)

    assert comparison.verdict == "no significant difference", comparison.sentence
    assert comparison.ratio == pytest.approx(1.0, abs=0.02)


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (0.990, 0.995, "no significant difference"),
        (0.95, 0.97, "faster"),
        (1.005, 1.01, "no significant difference"),
        (1.03, 1.05, "slower"),
    ],
    ids=["tiny-speedup-inside-margin", "real-speedup", "tiny-slowdown", "real-slowdown"],
)
def test_verdict_margin(low: float, high: float, expected: str) -> None:
    assert verdict_of(low, high, margin=0.02) == expected


def test_comparison_records_contention(tiny_model) -> None:
    spec = ComparisonSpec(min_pairs=20, min_seconds=0.2, max_seconds=2.0, threads=1)

    comparison = compare_models(tiny_model, tiny_model, spec)

    assert comparison.contention is not None
    assert comparison.contention.wall_s >= 0.2
