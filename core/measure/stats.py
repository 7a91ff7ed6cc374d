"""Latency statistics and the stability rule.

Percentiles use linear interpolation (numpy's default). A measurement is *stable* when the p50
of each of the last `windows` consecutive windows lies within `tolerance` of their mean p50:
max |p50_i - mean| / mean <= tolerance (perf_analyzer's rule, 3 windows within 10 %).

The interval of a median from order statistics (`median_interval`, the sign test inverted):
for n independent draws x_1..x_n of a continuous distribution with median theta, the count
N = #{x_j < theta} is Binomial(n, 1/2), and x_(k) > theta exactly when N <= k - 1, so
P(x_(k) <= theta <= x_(n+1-k)) = 1 - 2 B(k - 1), B the Binomial(n, 1/2) CDF. The largest k
with 2 B(k - 1) <= alpha gives an interval of confidence at least 1 - alpha that assumes
nothing of the distribution's shape: exact where the percentile bootstrap of a median, with a
dozen draws, covers less than it says. Below some n no k >= 1 fits (n < 6 at alpha = 0.05): no
interval exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np

PERCENTILES = (10, 50, 90, 95, 99)


def latency_summary(latencies_ms: Sequence[float]) -> dict[str, float]:
    """p10/p50/p90/p95/p99, mean, std, min, max and coefficient of variation, in ms."""
    values = np.asarray(latencies_ms, dtype=np.float64)
    if values.size == 0:
        raise ValueError("no latencies to summarise")
    summary = {
        f"p{q}_ms": float(v)
        for q, v in zip(PERCENTILES, np.percentile(values, PERCENTILES), strict=True)
    }
    mean = float(values.mean())
    summary.update(
        mean_ms=mean,
        std_ms=float(values.std(ddof=1)) if values.size > 1 else 0.0,
        min_ms=float(values.min()),
        max_ms=float(values.max()),
    )
    summary["cv"] = summary["std_ms"] / mean if mean > 0 else 0.0
    return summary


def windows_agree(
    window_p50s: Sequence[float], *, windows: int = 3, tolerance: float = 0.10
) -> bool:
    """True when the last `windows` window medians agree within `tolerance` of their mean."""
    deviation = window_deviation(window_p50s, windows=windows)
    return deviation is not None and deviation <= tolerance


def window_deviation(window_p50s: Sequence[float], *, windows: int = 3) -> float | None:
    """What the stability rule looks at: max |p50_i - mean| / mean over the last `windows`
    window medians; None when there are fewer windows or their mean is not positive. Between
    half of `window_spread` (max-min over the mean) and (windows-1)/windows of it: a spread of
    19 % can be stable at 10 %."""
    if len(window_p50s) < windows:
        return None
    recent = np.asarray(window_p50s[-windows:], dtype=np.float64)
    mean = recent.mean()
    return float(np.max(np.abs(recent - mean)) / mean) if mean > 0 else None


def window_spread(window_p50s: Sequence[float], *, windows: int = 3) -> float:
    """Relative spread (max-min)/mean of the last `windows` window medians."""
    recent = np.asarray(window_p50s[-windows:], dtype=np.float64)
    if recent.size == 0 or recent.mean() <= 0:
        return 0.0
    return float((recent.max() - recent.min()) / recent.mean())


def median_interval(values: Sequence[float], *, confidence: float) -> tuple[float, float] | None:
    """(x_(k), x_(n+1-k)): an interval of the median with at least `confidence`, from order
    statistics (see the module docstring); None when there are too few values for one."""
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    k = _order_rank(ordered.size, 1.0 - confidence)
    if k == 0:
        return None
    return float(ordered[k - 1]), float(ordered[ordered.size - k])


def _order_rank(n: int, alpha: float) -> int:
    """The largest k <= n / 2 with 2 P(Binomial(n, 1/2) <= k - 1) <= alpha; 0 when none.
    In exact integers: 2^n passes a float's range past n = 1023 (a resolve of many rounds)."""
    share = Fraction(alpha)
    limit = share.numerator * 2**n  # 2 below / 2^n > alpha  <=>  2 below den > num 2^n
    k, below, term = 0, 0, 1  # term = C(n, k)
    while k < n // 2:
        below += term  # below = 2^n P(N <= k)
        if 2 * below * share.denominator > limit:
            break
        k += 1
        term = term * (n - k + 1) // k
    return k
