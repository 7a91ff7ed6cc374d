"""Label, unit and direction of any stored metric, so a comparison can rank and title by it.

Three sources, read in this order: the metric table (`optistudio.core.metrics.METRICS`: what
every benchmark and accuracy run measures), the generic accuracy metrics every judged run has
(`GENERIC_METRICS`: min_cosine, mean_abs_error), then the task metrics the installed evaluators
declare (string_agreement, cer, map_iou, ...). A task cannot turn a table metric's direction
round, since the table answers first. A name none of them knows has no direction: it can be
shown, never ranked.
"""

from __future__ import annotations

from optistudio.core.metrics import METRICS, Metric
from optistudio.core.numerics.accuracy import GENERIC_METRICS
from optistudio.core.numerics.evaluators.base import MetricInfo, evaluators

LATENCY_AXES = (
    "p50_ms", "p90_ms", "p95_ms", "p99_ms", "mean_ms", "p10_ms", "min_ms", "max_ms",
    "ms_per_token_p50", "ms_per_token_p99", "ttft_ms",
)  # fmt: skip
"""The latencies a Pareto view may put on its x axis (the budget is on the same axis); a
decoder's time per token and time to first token among them."""
TABLE_ACCURACY = ("cosine_error", "mean_cosine", "max_abs_error", "top1_agreement", "top1_drop")
"""The metric table's accuracy metrics (against the original, or labels)."""
TASK_UNITS = {"fraction": "0–1", "ratio": "", "points": "0.01 = 1 point", "value": ""}
"""How a task metric's unit reads in a title: fractions are stored as 0..1, not percent."""


def declared_metric(name: str) -> MetricInfo | None:
    """The generic or task metric called `name` as its declarer states it; None if unknown."""
    for metric in GENERIC_METRICS:
        if metric.name == name:
            return metric
    for info in evaluators:
        for metric in info.metrics:
            if metric.name == name:
                return metric
    return None


def find_metric(name: str) -> Metric | None:
    """`name`'s label, unit and direction: the metric table first, else its declarer."""
    if name in METRICS:
        return METRICS[name]
    declared = declared_metric(name)
    if declared is None:
        return None
    return Metric(name, declared.label, TASK_UNITS[declared.unit], declared.higher_is_better)


def higher_is_better(name: str) -> bool | None:
    """True or False where the metric has a better direction; None when it has none."""
    metric = find_metric(name)
    return None if metric is None else metric.higher_is_better


def ranking_direction(name: str) -> bool:
    """`higher_is_better(name)`, or ValueError saying why the metric cannot rank anything."""
    better = higher_is_better(name)
    if better is None:
        why = (
            "it is descriptive"
            if find_metric(name)
            else "neither the metric table nor an installed evaluator declares it"
        )
        raise ValueError(f"metric {name!r} has no better direction ({why}); it cannot rank points")
    return better


def is_better(name: str, value: float, other: float) -> bool:
    """Whether `value` is strictly better than `other` (ValueError without a direction)."""
    return value > other if ranking_direction(name) else value < other


def is_quality_metric(name: str) -> bool:
    """An accuracy figure with a direction: the table's own, a generic one or a task's."""
    if name in METRICS:
        return name in TABLE_ACCURACY
    return higher_is_better(name) is not None


def label_of(name: str) -> str:
    metric = find_metric(name)
    return metric.label if metric else name


def column_title(name: str) -> str:
    """'p50 latency (ms) ↓': label, unit and the direction arrow; the bare name if unknown."""
    metric = find_metric(name)
    if metric is None:
        return name
    arrow = {True: " ↑", False: " ↓", None: ""}[metric.higher_is_better]
    unit = f" ({metric.unit})" if metric.unit else ""
    return f"{metric.label}{unit}{arrow}"


def axis_title(name: str) -> str:
    """A chart axis: the column title and, in words, which way is better."""
    better = higher_is_better(name)
    words = "" if better is None else (", higher is better" if better else ", lower is better")
    return f"{column_title(name)}{words}"


def reference_value(name: str) -> float | None:
    """What an original scores against itself on a task's agreement metric (1 for agreement
    fractions and ratios, 0 for errors), so it sits on the chart beside its variants; None
    where that is not defined: metrics measured against labels, and unknown names."""
    declared = declared_metric(name)
    if declared is None or declared.needs_labels:
        return None
    if not declared.higher_is_better:
        return 0.0
    return 1.0 if declared.unit in ("fraction", "ratio") else None
