"""Latency statistics and the stability rule.

Percentiles use linear interpolation (numpy's default). A measurement is *stable* when the p50
of each of the last `windows` consecutive windows lies within `tolerance` of their mean p50:
max |p50_i - mean| / mean <= tolerance (perf_analyzer's rule, 3 windows within 10 %).
"""

from __future__ import annotations

from collections.abc import Sequence

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
    if len(window_p50s) < windows:
        return False
    recent = np.asarray(window_p50s[-windows:], dtype=np.float64)
    mean = recent.mean()
    return bool(mean > 0 and np.max(np.abs(recent - mean)) / mean <= tolerance)


def window_spread(window_p50s: Sequence[float], *, windows: int = 3) -> float:
    """Relative spread (max-min)/mean of the last `windows` window medians."""
    recent = np.asarray(window_p50s[-windows:], dtype=np.float64)
    if recent.size == 0 or recent.mean() <= 0:
        return 0.0
    return float((recent.max() - recent.min()) / recent.mean())
