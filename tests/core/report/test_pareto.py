"""Pareto frontier and sweet spot, with directions read from the metric table, and for task
metrics from the evaluator that declares them (`glyph_task`, tests/core/report/conftest.py)."""

from __future__ import annotations

import math

import pytest

from optistudio.core.metrics import METRICS, direction, is_better
from optistudio.core.report.metric_info import (
    axis_title,
    column_title,
    find_metric,
    higher_is_better,
    reference_value,
)
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


# -- task metrics: directions from the evaluator that declares them -------------------------

GLYPH_POINTS = [
    {"p50_ms": 1.0, "glyph_agreement": 0.70, "glyph_error_rate": 0.20},  # fast, reads badly
    {"p50_ms": 2.0, "glyph_agreement": 1.00, "glyph_error_rate": 0.00},  # the original
    {"p50_ms": 1.5, "glyph_agreement": 0.95, "glyph_error_rate": 0.01},
    {"p50_ms": 1.6, "glyph_agreement": 0.90, "glyph_error_rate": 0.30},  # dominated by #2
]


def test_a_task_metric_is_maximised_or_minimised_as_its_evaluator_declares(glyph_task) -> None:
    assert pareto_front(GLYPH_POINTS, ["p50_ms", "glyph_agreement"]) == [0, 1, 2]
    assert pareto_front(GLYPH_POINTS, ["p50_ms", "glyph_error_rate"]) == [0, 1, 2]
    flipped = [p | {"glyph_agreement": 1 - p["glyph_agreement"]} for p in GLYPH_POINTS]
    assert pareto_front(flipped, ["p50_ms", "glyph_agreement"]) == [0]  # higher is better


def test_the_sweet_spot_reads_a_task_metric(glyph_task) -> None:
    best = sweet_spot(GLYPH_POINTS, latency="p50_ms", budget=1.8, quality="glyph_agreement")
    assert best == 2
    rate = sweet_spot(GLYPH_POINTS, latency="p50_ms", budget=1.8, quality="glyph_error_rate")
    assert rate == 2


def test_a_task_metric_no_installed_evaluator_declares_cannot_rank() -> None:
    refused = r"'glyph_agreement' has no better direction \(neither the metric table nor an inst"
    with pytest.raises(ValueError, match=refused):
        pareto_front(GLYPH_POINTS, ["p50_ms", "glyph_agreement"])


def test_the_metric_table_answers_before_any_task(glyph_task) -> None:
    assert find_metric("cosine_error") == METRICS["cosine_error"]  # the task says ↑; table ↓
    points = [{"p50_ms": 1.0, "cosine_error": 0.2}, {"p50_ms": 1.0, "cosine_error": 0.0}]
    assert pareto_front(points, LAT_ERR) == [1]


def test_labels_units_and_directions_of_any_stored_metric(glyph_task) -> None:
    assert axis_title("glyph_agreement") == "Glyph agreement (0–1) ↑, higher is better"
    assert axis_title("glyph_error_rate") == "Glyph error rate ↓, lower is better"
    assert axis_title("p90_ms") == "p90 latency (ms) ↓, lower is better"
    assert higher_is_better("min_cosine") is True  # a generic accuracy metric
    assert higher_is_better("mean_abs_error") is False
    assert higher_is_better("no_such_metric") is None
    assert column_title("no_such_metric") == "no_such_metric"


def test_an_original_is_exact_only_on_agreement_metrics(glyph_task) -> None:
    assert reference_value("glyph_agreement") == 1.0
    assert reference_value("glyph_error_rate") == 0.0
    assert reference_value("glyph_accuracy") is None  # against labels: the original is no 1.0
    assert reference_value("no_such_metric") is None
