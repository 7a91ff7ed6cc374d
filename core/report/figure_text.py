"""A compared figure as text: 'identical' where a variant's outputs match its original's.

An accuracy figure measured against the original (error, cosine) that lies within
`ties.RESOLUTION` (1e-6) of the original's own score on it is float rounding, not a
difference: a max error of 1.055e-14 between two FP32 runs reads 'identical', as the ties that
rank the table treat it. Any other figure reads with four significant digits (thousands
grouped above 1000); the exact value stays in the CSV and JSON downloads.
"""

from __future__ import annotations

from optistudio.core.report.ties import RESOLUTION, SHOWN_DIGITS

IDENTICAL = "identical"
EXACT = {
    "cosine_error": 0.0,
    "max_abs_error": 0.0,
    "mean_abs_error": 0.0,
    "mean_cosine": 1.0,
    "min_cosine": 1.0,
}
"""The figures that compare outputs with the original's, and the original's own score on each.
Agreement counts (top-1) are left out: all top-1 alike is no claim the outputs are identical."""
RESOLUTION_TEXT = f"{RESOLUTION:g}".replace("e-0", "e-")
"""The resolution as people write it: '1e-6'."""
IDENTICAL_NOTE = (
    f"'{IDENTICAL}': error or cosine within {RESOLUTION_TEXT} of the original's own (float "
    "rounding, no difference)"
)
"""What a table or report says once under its figures."""


def is_identical(metric: str, value: float) -> bool:
    """Whether `value` of `metric` says the outputs match the original's (module docstring)."""
    exact = EXACT.get(metric)
    return exact is not None and abs(value - exact) <= RESOLUTION


def figure_text(metric: str, value: float) -> str:
    """'identical', '1,234', '0.01234': how a table cell or a hover shows `value`."""
    if is_identical(metric, value):
        return IDENTICAL
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.{SHOWN_DIGITS}g}"
