"""Which differences between two results matter: the rule behind every "best" and sweet spot.

Two figures of one metric are a tie when their difference says nothing:

- accuracy figures (error vs the original, cosine, agreement, a task's metrics): when they
  differ by less than `RESOLUTION` (1e-6) absolutely or relatively, or read the same at the
  precision the table shows them (`SHOWN_DIGITS` significant digits). A 1e-14 difference in
  error is float rounding, not a more accurate variant;
- measured figures (latency, throughput, memory): when |a - b| <= noise * max(|a|, |b|), the
  noise being the larger relative noise of the two rows (a benchmark's spread of its window
  medians, an optimize run's speedup interval), never less than `MEASURED_FLOOR` (2 %).

A tie never crowns either side: on a tie in accuracy, the faster result wins.
"""

from __future__ import annotations

from optistudio.core.report.metric_info import is_quality_metric

RESOLUTION = 1e-6
"""Accuracy differences below this (absolute, or relative to the larger value) are ties."""
SHOWN_DIGITS = 4
"""Significant digits the comparison table shows; figures that read alike there are ties."""
MEASURED_FLOOR = 0.02
"""Least relative noise assumed for a measured figure (2 %): repeated runs on a quiet machine
move by about this much, so a smaller difference crowns nobody."""


def shown(value: float) -> str:
    """`value` as the table shows it (4 significant digits)."""
    return f"{value:.{SHOWN_DIGITS}g}"


def accuracy_tie(a: float, b: float) -> bool:
    """Two accuracy figures too close to rank (module docstring)."""
    gap = abs(a - b)
    return gap <= RESOLUTION or gap <= RESOLUTION * max(abs(a), abs(b)) or shown(a) == shown(b)


def measured_tie(a: float, b: float, noise: float | None = None) -> bool:
    """Two measured figures within `noise` (relative; `MEASURED_FLOOR` at least) of each other."""
    allowed = max(noise or 0.0, MEASURED_FLOOR) * max(abs(a), abs(b))
    return abs(a - b) <= allowed or shown(a) == shown(b)


def tie(metric: str, a: float, b: float, noise: float | None = None) -> bool:
    """Whether `a` and `b` of `metric` are a tie: accuracy by its resolution, any other figure
    by the measurement's `noise`."""
    if is_quality_metric(metric):
        return accuracy_tie(a, b)
    return measured_tie(a, b, noise)


def worst_noise(*noises: float | None) -> float | None:
    """The largest of the rows' noises (None when none is known)."""
    known = [n for n in noises if n is not None]
    return max(known) if known else None
