"""The Batching page's what-if past the ceiling, without Streamlit: one sentence, no latency."""

from __future__ import annotations

import math

from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.tuner import capacity
from optistudio.studio import batching_whatif as whatif

SLOW = LatencyProfile(batch_sizes=[1, 2, 4], mean_ms=[200.0, 360.0, 700.0])
SETTINGS = BatchingSettings(max_batch_size=4, timeout_ms=1)


def test_an_overloaded_what_if_says_it_in_one_sentence_and_shows_no_latency() -> None:
    ceiling = capacity(SLOW, SETTINGS)

    line = whatif.overload_line(SLOW, SETTINGS, 20.0)
    band = whatif.predict_band(SLOW, SETTINGS, rate=20.0)
    figures = whatif.headline(band, whatif.predict(SLOW, SETTINGS, rate=20.0), overloaded=True)

    assert line == (
        f"Overloaded: ceiling {ceiling:.3g} req/s below the offered 20 req/s; latency grows "
        "without bound."
    )
    assert figures["p50_ms"] is None and figures["p99_ms"] is None
    assert figures["mean_queue_ms"] is None and figures["throughput"] > 0
    assert "ms" not in whatif.overloaded_band_line(band)  # no percentile, in or out of a band


def test_a_rate_under_the_ceiling_is_not_overloaded() -> None:
    assert whatif.overload_line(SLOW, SETTINGS, 0.5 * capacity(SLOW, SETTINGS)) is None


def test_the_sweep_shows_no_percentile_past_the_ceiling() -> None:
    frame = whatif.rate_sweep(SLOW, SETTINGS, seconds=5)
    top = capacity(SLOW, SETTINGS)

    past = frame[frame["rate"] > top]
    under = frame[frame["rate"] <= top]
    assert len(past) >= 1 and len(under) >= 1
    assert past[["p50_ms", "p99_ms", "p99_high_ms"]].isna().all().all()
    assert all(math.isfinite(v) for v in under["p99_ms"])
