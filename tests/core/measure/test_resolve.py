"""More rounds after an unsteady first look: the order-statistics interval, its looks, and rounds
of models whose run time the test sets (busy-waits), pinned or beside a busy core alike."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper, save

from optistudio.core.backends import LoadedModel
from optistudio.core.measure.compare import (
    FASTER,
    ComparisonSpec,
    compare_loaded,
    straddles,
)
from optistudio.core.measure.resolve import (
    LOOK_ROUNDS,
    LOOKS,
    ROUND_S,
    Resolution,
    _interval,
    resolve_loaded,
    resolve_models,
)
from optistudio.core.measure.stats import median_interval

Pace = Callable[[int], float]
"""Run index -> how many times its base time that run takes."""


class Paced(LoadedModel):
    """Busy-waits `ms` times `pace(run)`: a model whose run time the test sets."""

    def __init__(self, ms: float, pace: Pace | None = None) -> None:
        self.ms = ms
        self.pace: Pace = pace or (lambda run: 1.0)
        self.runs = 0
        self.details = {}

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        end = time.perf_counter() + self.ms * self.pace(self.runs) / 1000
        self.runs += 1
        while time.perf_counter() < end:
            pass
        return []


# --- the statistics ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "expected"),
    [(5, None), (6, (1.0, 6.0)), (12, (3.0, 10.0))],
    ids=["too-few", "six-min-max", "twelve-third"],
)
def test_median_interval_reads_the_binomial_order_statistics(
    n: int, expected: tuple[float, float] | None
) -> None:
    values = np.random.default_rng(0).permutation(np.arange(1.0, n + 1))

    assert median_interval(values, confidence=0.95) == expected


def test_median_interval_covers_at_least_its_confidence_on_skewed_draws() -> None:
    rng = np.random.default_rng(1)
    trials, n, theta = 4000, 12, float(np.exp(0.0))  # lognormal(0, 1): median 1

    hits = 0
    for _ in range(trials):
        low, high = median_interval(rng.lognormal(0.0, 1.0, n), confidence=0.95) or (0, 0)
        hits += low <= theta <= high

    # Exact coverage at n = 12, k = 3 is 1 - 2 * 79 / 4096 = 0.961; sd over 4000 trials 0.003.
    assert hits / trials >= 0.95


def test_looks_at_a_ratio_on_the_threshold_rarely_say_faster() -> None:
    """The hardest case for a false 'faster': the true median ratio sits exactly at 1 - m.
    Over every look of the schedule, the share of runs that ever say 'faster' stays under
    alpha / 2 (the Bonferroni bound of the module docstring)."""
    rng = np.random.default_rng(2)
    spec, trials = ComparisonSpec(), 2000
    threshold = 1.0 - spec.min_effect

    said_faster = 0
    for _ in range(trials):
        ratios = threshold * rng.lognormal(0.0, 0.05, LOOK_ROUNDS[-1])
        for n in LOOK_ROUNDS:
            found = _interval(ratios[:n], spec)
            if found is not None and not straddles(found.low, found.high, spec.min_effect):
                said_faster += found.verdict == FASTER
                break

    alpha = 1.0 - spec.confidence
    assert said_faster / trials <= alpha / 2 * (len(LOOK_ROUNDS) / LOOKS) + 0.005


def test_a_look_needs_nearly_every_round_below_the_threshold() -> None:
    spec = ComparisonSpec()

    ten_of_twelve = _interval([0.7] * 10 + [1.1] * 2, spec)
    eleven_of_twelve = _interval([0.7] * 11 + [1.1], spec)

    assert ten_of_twelve is not None and eleven_of_twelve is not None
    assert ten_of_twelve.verdict != FASTER
    assert eleven_of_twelve.verdict == FASTER
    assert eleven_of_twelve.confidence == spec.confidence


# --- rounds of models whose run time the test sets --------------------------------------------


def noisy_first(runs: int) -> Pace:
    """For its first `runs` runs, alternately a tenth and ten times A's time (no stall on a
    loaded machine turns a 10x pair below 1); 0.7 of it after."""
    return lambda run: (0.1 if run % 2 else 10.0) if run < runs else 0.7


@pytest.mark.timing
def test_clear_difference_noisy_at_first_resolves_with_more_rounds() -> None:
    first_look = ComparisonSpec(warmup_runs=1, min_pairs=60, min_seconds=0, max_seconds=60)
    a, b = Paced(2.0), Paced(2.0, noisy_first(1 + 60))

    first = compare_loaded(a, b, {}, {}, first_look)
    found = resolve_loaded(a, b, {}, {}, first_look, cap_s=20.0)

    assert first.pairs == 60
    assert straddles(first.low, first.high, first.margin), first.sentence
    # B takes 0.7 of A's time; a loaded machine stalls the longer run more often, which only
    # widens the gap, so what is guaranteed is the verdict, not the figure.
    assert found.resolved and found.interval is not None
    assert found.interval.verdict == FASTER
    assert found.rounds in LOOK_ROUNDS
    assert found.note() == f"resolved after {found.rounds} more rounds: faster"


def in_turns(fast_s: float) -> Pace:
    """Half A's time for `fast_s`, then twice it for 2 x `fast_s` (a pair then takes twice as
    long, so both spells hold as many rounds), in turn: over a dozen rounds or more B is
    neither faster nor slower, as at most one spell's rounds (a few) tip the count."""
    epoch = time.perf_counter()

    def pace(run: int) -> float:
        return 0.5 if (time.perf_counter() - epoch) % (3 * fast_s) < fast_s else 2.0

    return pace


@pytest.mark.timing
def test_no_difference_stops_at_the_cap_and_says_so() -> None:
    a, b = Paced(2.0), Paced(2.0, in_turns(2 * ROUND_S))
    cap = 1.5

    began = time.perf_counter()
    found = resolve_loaded(a, b, {}, {}, ComparisonSpec(warmup_runs=2), cap_s=cap)
    wall = time.perf_counter() - began

    assert not found.resolved
    assert found.rounds >= 1
    assert cap <= found.seconds <= cap + found.longest_round_s
    assert found.seconds <= wall
    assert found.note() == f"still unresolved after the 1.5 s cap ({found.rounds} more rounds)"
    if found.interval is not None:  # a look was reached: it straddles 0.98
        assert found.interval.low < 0.98 <= found.interval.high


@pytest.mark.timing
def test_the_cap_is_honoured_when_one_round_is_long() -> None:
    a, b = Paced(30.0), Paced(30.0)

    found = resolve_loaded(a, b, {}, {}, ComparisonSpec(warmup_runs=2), cap_s=0.2)

    assert found.rounds >= 1
    assert found.longest_round_s >= 2 * 0.030  # a pair of runs, at least
    assert found.seconds <= 0.2 + found.longest_round_s
    assert found.interval is None  # too few rounds for any look
    assert not found.resolved


@pytest.mark.parametrize(
    ("fields", "note"),
    [
        ({"rounds": 12, "verdict": "faster"}, "resolved after 12 more rounds: faster"),
        (
            {"rounds": 24, "verdict": "no significant difference", "busy": "x"},
            "resolved after 24 more rounds on one thread beside the machine's load: "
            "not faster by the 2 % margin",
        ),
        ({"rounds": 3, "verdict": None}, "still unresolved after the 20 s cap (3 more rounds)"),
    ],
    ids=["faster", "not-faster-busy", "unresolved"],
)
def test_note_says_which(fields: dict[str, object], note: str) -> None:
    verdict = fields.pop("verdict")
    interval = (
        {"ratio": 0.7, "low": 0.65, "high": 0.75}
        if verdict == "faster"
        else {"ratio": 1.0, "low": 0.99, "high": 1.01}
    )
    found = Resolution.model_validate(
        {"seconds": 3.0, "cap_s": 20.0, "threads": None, "margin": 0.02}
        | {
            "interval": None
            if verdict is None
            else interval | {"confidence": 0.95, "pairs": 12, "margin": 0.02, "verdict": verdict}
        }
        | fields
    )

    assert found.note() == note


# --- real models ------------------------------------------------------------------------------


def matmul_chain(path: Path, layers: int) -> Path:
    """x [n, 256] through `layers` MatMuls by a 256 x 256 weight: time grows with layers."""
    weight = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32) / 16, "w"
    )
    names = ["x"] + [f"h{i}" for i in range(layers - 1)] + ["y"]
    nodes = [helper.make_node("MatMul", [names[i], "w"], [names[i + 1]]) for i in range(layers)]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 256])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    save(model, path)
    return path


@pytest.mark.timing
def test_real_models_resolve_on_their_backend(tmp_path: Path) -> None:
    heavy = matmul_chain(tmp_path / "heavy.onnx", 8)
    light = matmul_chain(tmp_path / "light.onnx", 1)

    spec = ComparisonSpec(warmup_runs=2, batch_size=64)

    found = resolve_models(heavy, light, spec, cap_s=20.0)

    assert found.resolved and found.interval is not None
    assert found.interval.verdict == FASTER
    assert found.interval.high < 0.5
    assert found.threads == 1 or not found.busy  # one-thread rounds whenever the machine is busy


def test_median_interval_takes_thousands_of_values() -> None:
    """2^n passes a float's range past n = 1023: a resolve of many rounds reached it (the
    zoo's ppocr_cls, 2026-12-06). Its ranks follow the normal approximation there."""
    n = 3000
    values = np.random.default_rng(2).permutation(np.arange(1.0, n + 1))

    low, high = median_interval(values, confidence=0.95) or (0.0, 0.0)

    expected = n / 2 - 1.96 * math.sqrt(n) / 2  # the normal approximation of the lower rank
    assert abs(low - expected) <= 2 and high == n + 1 - low
