"""Pareto frontier and sweet spot, with directions read from the metric table."""

from __future__ import annotations

import math

import pytest

from optistudio.core.metrics import METRICS, direction, is_better
from optistudio.core.report.pareto import dominates, pareto_front, sweet_spot

LAT_ERR = ["p50_ms", "cosine_error"]


def test_directions_come_from_the_one_table() -> None:
    assert direction("p99_ms") == "lower is better"
    assert direction("throughput") == "higher is better"
    assert direction("mean_cosine") == "higher is better"
    assert direction("cosine_error") == "lower is better"
    assert direction("samples") == ""
    assert direction("not_a_metric") == ""
    assert is_better("throughput", 10.0, 9.0) and not is_better("p50_ms", 10.0, 9.0)
    with pytest.raises(ValueError, match="no better direction"):
        is_better("samples", 1.0, 2.0)


def test_every_latency_is_lower_is_better_and_accuracy_has_a_direction() -> None:
    latencies = [m for name, m in METRICS.items() if name.endswith("_ms")]
    assert latencies and all(m.higher_is_better is False for m in latencies)
    for name in ("mean_cosine", "cosine_error", "max_abs_error", "top1_agreement", "top1_drop"):
        assert METRICS[name].higher_is_better is not None


def test_single_point_is_the_frontier() -> None:
    assert pareto_front([{"p50_ms": 3.0, "cosine_error": 0.1}], LAT_ERR) == [0]


def test_dominated_points_are_left_out() -> None:
    points = [
        {"p50_ms": 1.0, "cosine_error": 0.05},  # fast, a little error
        {"p50_ms": 2.0, "cosine_error": 0.0},  # slower, exact
        {"p50_ms": 2.5, "cosine_error": 0.01},  # dominated by #1
        {"p50_ms": 0.8, "cosine_error": 0.2},  # fastest
        {"p50_ms": 1.0, "cosine_error": 0.06},  # same latency as #0, worse error
    ]
    assert pareto_front(points, LAT_ERR) == [0, 1, 3]


def test_ties_stay_on_the_frontier_together() -> None:
    points = [
        {"p50_ms": 1.0, "cosine_error": 0.0},
        {"p50_ms": 1.0, "cosine_error": 0.0},
        {"p50_ms": 1.0, "cosine_error": 0.1},
    ]
    assert pareto_front(points, LAT_ERR) == [0, 1]


def test_higher_is_better_metrics_are_maximised() -> None:
    points = [
        {"p99_ms": 5.0, "throughput": 100.0},
        {"p99_ms": 5.0, "throughput": 200.0},
        {"p99_ms": 4.0, "throughput": 50.0},
    ]
    assert pareto_front(points, ["p99_ms", "throughput"]) == [1, 2]


def test_missing_values_are_never_on_the_frontier() -> None:
    points = [{"p50_ms": 1.0, "cosine_error": None}, {"p50_ms": 9.0, "cosine_error": math.nan}]
    assert pareto_front(points, LAT_ERR) == []


def test_three_metrics_agree_with_brute_force() -> None:
    import random

    rng = random.Random(3)
    metrics = ["p50_ms", "throughput", "cosine_error"]
    points = [{m: float(rng.randint(0, 4)) for m in metrics} for _ in range(60)]
    front = pareto_front(points, metrics)
    costs = [(p["p50_ms"], -p["throughput"], p["cosine_error"]) for p in points]
    expected = [i for i, c in enumerate(costs) if not any(dominates(o, c) for o in costs)]
    assert front == expected
    two = pareto_front(points, LAT_ERR)  # the 2-D sweep against the definition
    costs2 = [(p["p50_ms"], p["cosine_error"]) for p in points]
    assert two == [i for i, c in enumerate(costs2) if not any(dominates(o, c) for o in costs2)]


def test_a_metric_without_direction_cannot_rank() -> None:
    with pytest.raises(ValueError, match="samples"):
        pareto_front([{"samples": 1.0, "p50_ms": 1.0}], ["samples", "p50_ms"])


def test_sweet_spot_is_the_most_accurate_within_budget_then_the_fastest() -> None:
    points = [
        {"p50_ms": 1.0, "cosine_error": 0.2},
        {"p50_ms": 2.0, "cosine_error": 0.01},
        {"p50_ms": 1.5, "cosine_error": 0.01},
        {"p50_ms": 9.0, "cosine_error": 0.0},
    ]
    assert sweet_spot(points, latency="p50_ms", budget=2.0, quality="cosine_error") == 2
    assert sweet_spot(points, latency="p50_ms", budget=0.5, quality="cosine_error") is None
    assert sweet_spot(points, latency="p50_ms", budget=100, quality=None) == 0
    unknown = [{"p50_ms": 1.0, "cosine_error": None}, {"p50_ms": 3.0, "cosine_error": 0.1}]
    assert sweet_spot(unknown, latency="p50_ms", budget=5, quality="cosine_error") == 1
