"""What a profile of back-to-back runs does not see: the idle extra (a run after the model sat
idle takes longer, or on a loaded machine shorter) and the hand-back's spread per batch."""

from __future__ import annotations

import time

import numpy as np
import pytest

from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.latency_profile import (
    IDLE_GAPS_MS,
    idle_extras,
    measure_latency_profile,
)
from optistudio.core.batching.recalibrate import recalibrate
from optistudio.core.batching.results import BatchRecord
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.simulate import resampled, simulate, simulate_band

SETTINGS = BatchingSettings(max_batch_size=4, timeout_ms=0)


def steady(**extra: object) -> LatencyProfile:
    return LatencyProfile(batch_sizes=[1, 2, 4], mean_ms=[10.0, 14.0, 22.0], **extra)  # type: ignore[arg-type]


def test_the_idle_extra_is_zero_back_to_back_and_interpolated_on_a_log_scale() -> None:
    profile = steady(idle_extra_ms=[(1.0, 2.0), (100.0, 6.0)])

    assert profile.idle_extra(0.0) == 0.0
    assert profile.idle_extra(1.0) == pytest.approx(2.0)
    assert profile.idle_extra(10.0) == pytest.approx(4.0)  # halfway on a log scale
    assert profile.idle_extra(5000.0) == pytest.approx(6.0)  # the longest gap's beyond it
    assert steady().idle_extra(50.0) == 0.0


def test_a_low_rate_pays_the_idle_extra_and_a_saturating_loop_does_not() -> None:
    plain, idle = steady(), steady(idle_extra_ms=[(1.0, 3.0), (50.0, 3.0)])

    sparse = [simulate(p, SETTINGS, rate=5, requests=2000, service="mean") for p in (plain, idle)]
    closed = [
        simulate(p, SETTINGS, process="closed", clients=8, requests=2000, service="mean")
        for p in (plain, idle)
    ]

    assert sparse[1].p50_ms - sparse[0].p50_ms == pytest.approx(3.0, abs=0.2)
    assert closed[1].throughput == pytest.approx(closed[0].throughput, rel=0.01)


def test_a_negative_idle_extra_shortens_a_batch_but_never_below_its_floor() -> None:
    profile = steady(idle_extra_ms=[(1.0, -50.0)])

    result = simulate(profile, SETTINGS, rate=2, requests=500, service="mean")

    assert result.p50_ms == pytest.approx(10.0 * 0.2, rel=0.05)


def test_recalibration_takes_the_expected_idle_extra_off_before_refitting() -> None:
    """Every batch of a sparse run follows a gap: its runner time is the model 20 % slower plus
    the idle extra. The refit must find the 20 %, not fold the extra into the speed."""
    profile = steady(idle_extra_ms=[(1.0, 5.0)], runs=[(1, 10.0), (2, 14.0), (4, 22.0)] * 10)
    batches, now = [], 0.0
    for _ in range(300):
        run = (10.0 * 1.2 + 5.0) / 1000
        batches.append(BatchRecord(0, 1, 1, now, now, now, now + run))
        now += run + 0.2

    calibrated = recalibrate(profile, batches)
    unaware = recalibrate(profile.model_copy(update={"idle_extra_ms": []}), batches)

    assert calibrated.latency_ms(1) / profile.latency_ms(1) == pytest.approx(1.2, abs=0.02)
    assert unaware.latency_ms(1) / profile.latency_ms(1) > 1.6


@pytest.mark.timing
def test_the_profiler_measures_the_idle_extra_on_a_real_model(tiny_model) -> None:  # type: ignore[no-untyped-def]
    profile = measure_latency_profile(
        tiny_model, max_batch_size=2, min_runs=3, min_seconds=0.02, probe_time_scale=0.25
    )

    assert [gap for gap, _ in profile.idle_extra_ms] == list(IDLE_GAPS_MS)
    assert all(abs(extra) < 50 for _, extra in profile.idle_extra_ms)  # ms, a tiny model
    # the hand-back is the mean of its gaps, or none and why (no two batches back to back)
    if profile.handoff_gaps_ms:
        assert profile.handoff_ms == pytest.approx(
            float(np.mean(profile.handoff_gaps_ms)), rel=0.01
        )
        assert "handoff_ms" not in profile.unmeasured
    else:
        assert profile.handoff_ms is None
        assert "could not be measured here" in profile.unmeasured["handoff_ms"]


class _SlowAfterIdle:
    """A model whose run takes 1 ms, 10 ms more after 10 ms or more without a run."""

    def __init__(self) -> None:
        self.last = 0.0

    def run(self, feeds: dict[str, np.ndarray]) -> None:
        slow = time.perf_counter() - self.last > 0.010
        time.sleep(0.011 if slow else 0.001)
        self.last = time.perf_counter()


@pytest.mark.timing
def test_idle_extras_find_a_known_penalty() -> None:
    extras = dict(idle_extras(_SlowAfterIdle(), {}, gaps_ms=(1.0, 40.0), trials=6))  # type: ignore[arg-type]

    assert extras[1.0] == pytest.approx(0.0, abs=3.0)  # sleeps overshoot on a busy machine
    assert extras[40.0] == pytest.approx(10.0, abs=3.0)


def test_the_hand_back_spread_is_drawn_per_batch_and_widens_the_band() -> None:
    """Two profiles with the same hand-back mean; one spends it as a rare 10 ms stall."""
    runs = [(b, ms) for _ in range(40) for b, ms in ((1, 10.0), (2, 14.0), (4, 22.0))]
    even = steady(runs=runs, handoff_ms=1.0, handoff_gaps_ms=[1.0] * 40)
    stalls = steady(runs=runs, handoff_ms=1.0, handoff_gaps_ms=[0.5] * 38 + [10.5, 10.5])
    settings = BatchingSettings(max_batch_size=4, timeout_ms=2)

    points = [simulate(p, settings, rate=40, requests=20_000) for p in (even, stalls)]
    bands = [simulate_band(p, settings, rate=40, seconds=20) for p in (even, stalls)]

    assert points[1].mean_ms == pytest.approx(points[0].mean_ms, rel=0.05)
    assert points[1].p99_ms > points[0].p99_ms + 2  # 5 % of batches stall 10 ms
    assert bands[1].p99_high_ms - bands[1].p99_low_ms > bands[0].p99_high_ms - bands[0].p99_low_ms


def test_resampling_draws_the_hand_back_mean_from_its_measured_times() -> None:
    profile = steady(runs=[(1, 10.0)] * 20, handoff_ms=1.0, handoff_gaps_ms=[0.1] * 9 + [9.1])
    rng = np.random.default_rng(0)

    means = [resampled(profile, rng).handoff_ms for _ in range(200)]

    assert min(means) < 0.5 < 1.5 < max(means)  # type: ignore[operator]
    assert float(np.mean(means)) == pytest.approx(1.0, rel=0.15)  # type: ignore[arg-type]


def test_a_gap_that_held_the_policys_wait_is_not_read_as_hand_back() -> None:
    """Two batches follow a run whose end found a request waiting: one long due (its gap is
    the runtime's 0.3 ms), one that arrived 0.5 ms before the end and waited out a 5 ms timeout
    (its gap is the policy's wait)."""
    profile = steady(runs=[(1, 10.0)] * 10, handoff_ms=1.0)
    batches = [
        BatchRecord(0, 1, 1, 0.000, 0.000, 0.000, 0.010),
        BatchRecord(0, 1, 1, 0.000, 0.0103, 0.0103, 0.0203),
        BatchRecord(0, 1, 1, 0.0198, 0.0248, 0.0248, 0.0348),
    ]

    calibrated = recalibrate(profile, batches, timeout_ms=5)
    unaware = recalibrate(profile, batches)

    assert calibrated.handoff_ms == pytest.approx(0.3)
    assert unaware.handoff_ms == pytest.approx((0.3 + 4.5) / 2)
