"""Pareto frontier and the sweet spot under a latency budget, directions from the metric table.

Any stored metric with a direction can rank: the table's, or a task metric its evaluator
declares (`optistudio.core.report.metric_info`); one without a direction is refused.

A point is on the frontier when no other point is at least as good in every metric and strictly
better in one. Identical points tie: none dominates the other, so all of them stay on the
frontier. Points missing a metric (None or NaN) are never on it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from optistudio.core.report.metric_info import ranking_direction

Point = Mapping[str, float | None]


def _signs(metrics: Sequence[str]) -> list[float]:
    """+1 to minimise, -1 to maximise, so every metric can be compared as 'smaller is better'."""
    return [-1.0 if ranking_direction(name) else 1.0 for name in metrics]


def _cost(point: Point, metrics: Sequence[str], signs: list[float]) -> tuple[float, ...] | None:
    values = [point.get(name) for name in metrics]
    if any(v is None or math.isnan(float(v)) for v in values):
        return None
    return tuple(sign * float(v) for sign, v in zip(signs, values, strict=True))  # type: ignore[arg-type]


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """Costs `a` dominate `b`: no worse anywhere and strictly better somewhere."""
    return all(x <= y for x, y in zip(a, b, strict=True)) and any(
        x < y for x, y in zip(a, b, strict=True)
    )


def pareto_front(points: Sequence[Point], metrics: Sequence[str]) -> list[int]:
    """Indices (ascending) of the points no other point dominates on `metrics`."""
    signs = _signs(metrics)
    costs = [(i, c) for i, p in enumerate(points) if (c := _cost(p, metrics, signs)) is not None]
    if len(metrics) == 2:
        return _front_2d(costs)
    return sorted(i for i, c in costs if not any(dominates(other, c) for _, other in costs))


def _front_2d(costs: list[tuple[int, tuple[float, ...]]]) -> list[int]:
    """O(n log n) sweep: sorted by first then second cost, a point is kept when its second cost
    beats every earlier one, or equals the last kept point exactly (a tie)."""
    front: list[int] = []
    last: tuple[float, ...] | None = None
    for index, cost in sorted(costs, key=lambda item: item[1]):
        if last is None or cost[1] < last[1] or cost == last:
            front.append(index)
            last = cost
    return sorted(front)


def sweet_spot(
    points: Sequence[Point], *, latency: str, budget: float, quality: str | None
) -> int | None:
    """The best point whose `latency` is within `budget`: best `quality` first, then fastest.

    Without a quality metric (or where no point has it) the fastest point within budget wins.
    None when nothing fits the budget.
    """
    (lat_sign,) = _signs([latency])
    q_sign = _signs([quality])[0] if quality else 0.0
    fitting = []
    for i, p in enumerate(points):
        value = p.get(latency)
        if value is None or math.isnan(float(value)) or float(value) > budget:
            continue
        q = p.get(quality) if quality else None
        q_cost = math.inf if q is None or math.isnan(float(q)) else q_sign * float(q)
        fitting.append((q_cost, lat_sign * float(value), i))
    return min(fitting)[2] if fitting else None
