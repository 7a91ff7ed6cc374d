"""Pareto frontier and the sweet spot under a latency budget, directions from the metric table.

Any stored metric with a direction can rank: the table's, or a task metric its evaluator
declares (`optistudio.core.report.metric_info`); one without a direction is refused.

A point is on the frontier when no other point is at least as good in every metric and better
in one by more than a tie (`optistudio.core.report.ties`: accuracy within its resolution,
latency within the measurement's noise). Tied points stay on the frontier together; a point
more accurate by float rounding alone is not kept for that. Points missing a metric (None or
NaN) are never on it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from optistudio.core.report.metric_info import ranking_direction
from optistudio.core.report.ties import accuracy_tie, tie, worst_noise

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


def dominates_beyond_ties(
    a: Sequence[float], b: Sequence[float], metrics: Sequence[str], noise: float | None = None
) -> bool:
    """Costs `a` dominate `b` once ties are set aside (`optistudio.core.report.ties`): no
    worse beyond a tie anywhere, and better beyond a tie somewhere."""
    better = False
    for x, y, name in zip(a, b, metrics, strict=True):
        if tie(name, x, y, noise):
            continue
        if x > y:
            return False
        better = True
    return better


def pareto_front(
    points: Sequence[Point],
    metrics: Sequence[str],
    noise: Sequence[float | None] | None = None,
) -> list[int]:
    """Indices (ascending) of the points no other point dominates on `metrics` by more than a
    tie; `noise` is each point's relative latency noise (None: unknown)."""
    signs = _signs(metrics)
    noises = list(noise) if noise is not None else [None] * len(points)
    costs = [(i, c) for i, p in enumerate(points) if (c := _cost(p, metrics, signs)) is not None]
    return sorted(
        i
        for i, c in costs
        if not any(
            dominates_beyond_ties(other, c, metrics, worst_noise(noises[i], noises[j]))
            for j, other in costs
            if j != i
        )
    )


def sweet_spot(
    points: Sequence[Point],
    *,
    latency: str,
    budget: float,
    quality: str | None,
) -> int | None:
    """The best point whose `latency` is within `budget`: best `quality` first, then fastest.

    Quality that ties with the best (a difference below its resolution, `ties.accuracy_tie`)
    counts as the best: the fastest of those wins. Without a quality metric (or where no point
    has it) the fastest point within budget wins. None when nothing fits the budget.
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
    if not fitting:
        return None
    best = min(fitting)[0]
    tied = [f for f in fitting if f[0] == best or (math.isfinite(best) and _q_tie(f[0], best))]
    return min(tied, key=lambda f: (f[1], f[0], f[2]))[2]


def _q_tie(cost: float, best: float) -> bool:
    return math.isfinite(cost) and accuracy_tie(cost, best)
