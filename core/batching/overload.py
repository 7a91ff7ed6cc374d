"""An overloaded what-if, said in one sentence: requests offered faster than a setting serves.

A setting's ceiling C (req/s) is the most it can serve (`tuner.capacity`: instances x the best
b / (latency(b) + the runtime's costs per batch), at most what the serving machinery passes).
Offered a rate R > C, the queue grows by R - C requests a second: after t seconds a request
waits about t (R - C) / C seconds, so every latency percentile grows with the run's length and
has no steady value. A simulated p50 of 20 000 requests is then a figure about 20 000
requests, not about the setting, and lies far outside the band of a shorter run. An overloaded
prediction therefore carries this sentence and no latency figure (`LATENCY_FIGURES` are
dropped: null in JSON, never Infinity); its throughput (the ceiling, as served) stays.
"""

from __future__ import annotations

from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.tuner import capacity

LATENCY_FIGURES = ("p50_ms", "p90_ms", "p99_ms", "mean_ms", "mean_queue_ms")
"""A prediction's latency figures, which an overloaded one does not have."""
BAND_LATENCY_FIGURES = (
    "p50_low_ms",
    "p50_high_ms",
    "p99_low_ms",
    "p99_high_ms",
    "p50_ms",
    "p99_ms",
)
"""A band's latency bounds and medians, likewise dropped."""


def overload(profile: LatencyProfile, settings: BatchingSettings, rate: float | None) -> str | None:
    """The sentence for `rate` (req/s, offered) above what `settings` can serve on `profile`,
    or None (no rate: a closed loop, which cannot overload)."""
    if not rate:
        return None
    ceiling = capacity(profile, settings)
    if rate <= ceiling:
        return None
    return overload_sentence(ceiling, rate)


def overload_sentence(ceiling: float, rate: float) -> str:
    """'overloaded: ceiling X req/s below the offered Y req/s; latency grows without bound'."""
    return (
        f"overloaded: ceiling {_figure(ceiling)} req/s below the offered {_figure(rate)} req/s; "
        "latency grows without bound"
    )


def _figure(value: float) -> str:
    """Three significant digits, never in e-notation (1480, 14.8, 0.412)."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"
