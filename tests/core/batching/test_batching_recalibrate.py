"""Recalibration: a Verify run's own batches refit the profile's service times."""

from __future__ import annotations

import re

import numpy as np
import pytest

from optistudio.core.batching.latency import QUANTILE_COUNT, LatencyProfile
from optistudio.core.batching.loadgen import LoadRun
from optistudio.core.batching.recalibrate import (
    calibration_line,
    recalibrate,
    saturated_refit,
    served_slowdown,
)
from optistudio.core.batching.results import BatchRecord, LoadResult
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.simulate import simulate
from optistudio.core.batching.trace import overall_slowdown
from optistudio.core.errors import InvalidSpec

SIZES = [1, 2, 4, 8]
BASE_MS = {1: 10.0, 2: 14.0, 4: 22.0, 8: 38.0}
PROFILE_RUNS = 20


def measured_profile(seed: int = 0) -> LatencyProfile:
    """A profile of PROFILE_RUNS interleaved runs per size, each within +-10 % of its base."""
    rng = np.random.default_rng(seed)
    runs = [(b, BASE_MS[b] * rng.uniform(0.9, 1.1)) for _ in range(PROFILE_RUNS) for b in SIZES]
    rows = [[ms for size, ms in runs if size == b] for b in SIZES]
    return LatencyProfile(
        batch_sizes=SIZES,
        mean_ms=[float(np.mean(r)) for r in rows],
        p50_ms=[float(np.percentile(r, 50)) for r in rows],
        p99_ms=[float(np.percentile(r, 99)) for r in rows],
        quantiles_ms=[np.percentile(r, np.linspace(0, 100, QUANTILE_COUNT)).tolist() for r in rows],
        runs=runs,
    )


def slower_trace(
    profile: LatencyProfile, factor: float, counts: dict[int, int], seed: int = 1
) -> list[BatchRecord]:
    """Batches whose runner times are the profile's own runs at that size times `factor`, one
    after the other on one instance (none waiting: no hand-back gap)."""
    rng = np.random.default_rng(seed)
    batches, now = [], 0.0
    for rows, count in counts.items():
        own = [ms for size, ms in profile.runs if size == rows]
        for ms in rng.choice(own, size=count):
            run = ms * factor / 1000
            batches.append(BatchRecord(0, rows, rows, now, now, now, now + run))
            now += run + 1.0
    return batches


def test_a_runner_20_percent_slower_moves_the_service_time_and_the_low_rate_p50_by_that() -> None:
    profile = measured_profile()
    trace = slower_trace(profile, 1.2, {1: 400, 2: 400})
    settings = BatchingSettings(max_batch_size=8, timeout_ms=0)

    calibrated = recalibrate(profile, trace, verify="Verify #7")
    before = simulate(profile, settings, rate=5, requests=4000).p50_ms
    after = simulate(calibrated, settings, rate=5, requests=4000).p50_ms

    for b in SIZES:  # 400 batches against 20 runs: about 19 % of the 20 %
        assert calibrated.latency_ms(b) / profile.latency_ms(b) == pytest.approx(1.2, abs=0.03)
    assert after / before == pytest.approx(1.2, abs=0.03)
    assert calibrated.calibration is not None
    assert calibrated.calibration.verify == "Verify #7"
    assert calibrated.calibration.batches == 800
    assert calibrated.calibration.p50_moved[1] == pytest.approx(20, abs=3)
    assert "Verify #7" in calibration_line(calibrated)
    assert "at batch 1 +19 %" in calibration_line(calibrated)


def test_the_blend_weighs_the_runs_against_the_batches_by_count() -> None:
    profile = measured_profile()
    equal = slower_trace(profile, 1.5, {4: PROFILE_RUNS})  # as many batches as runs

    calibrated = recalibrate(profile, equal)

    # the run's own slowdown (its draws of the profile's runs), half-weighted
    observed = np.mean([(b.run_end - b.run_start) * 1000 for b in equal]) / profile.latency_ms(4)
    assert calibrated.latency_ms(4) / profile.latency_ms(4) == pytest.approx((1 + observed) / 2)
    assert calibrated.calibration is not None
    assert calibrated.calibration.weights[4] == 2 * PROFILE_RUNS


def test_successive_verify_runs_converge_instead_of_the_last_one_winning() -> None:
    profile = measured_profile()
    once = recalibrate(profile, slower_trace(profile, 1.2, {1: 100}), verify="Verify #1")
    twice = recalibrate(once, slower_trace(profile, 1.0, {1: 120}, seed=2), verify="Verify #2")

    assert twice.latency_ms(1) / profile.latency_ms(1) == pytest.approx(1.083, abs=0.02)
    assert twice.calibration is not None
    assert twice.calibration.previous == ["Verify #1"]


def test_a_summary_with_a_hand_back_mean_replaces_the_profiles() -> None:
    class Summary:  # what a stored Verify result keeps of its batches
        runner = {3: (50, 18.0 * 1.1)}
        handoff_ms = 0.7

    profile = measured_profile().model_copy(update={"handoff_ms": 0.3})

    calibrated = recalibrate(profile, Summary())

    # batch 3 lies between 2 and 4 and goes to the smaller; every size moves alike
    assert calibrated.latency_ms(2) > profile.latency_ms(2)
    assert calibrated.handoff_ms == 0.7
    assert calibrated.calibration is not None
    assert calibrated.calibration.handoff_before_ms == 0.3


def test_a_run_without_batches_cannot_recalibrate() -> None:
    with pytest.raises(InvalidSpec, match="no batch"):
        recalibrate(measured_profile(), [])


def test_a_calibrated_profile_round_trips_through_json() -> None:
    profile = measured_profile()
    calibrated = recalibrate(profile, slower_trace(profile, 1.2, {2: 30}))

    again = LatencyProfile.model_validate_json(calibrated.model_dump_json())

    assert again == calibrated


def _served(*, saturated: bool) -> LoadResult:
    return LoadResult(
        throughput=90.0, p50_ms=40.0, p90_ms=80.0, p99_ms=200.0, mean_ms=50.0,
        mean_queue_ms=30.0, mean_compute_ms=20.0, mean_batch_size=3.0, completed=900,
        offered_rate=150.0, realised_rate=140.0, saturated=saturated,
    )  # fmt: skip


def test_a_saturated_runs_refit_is_refused_with_how_far_it_would_have_moved() -> None:
    profile = measured_profile()
    refit = recalibrate(profile, slower_trace(profile, 3.0, {1: 400, 4: 400}))

    why = saturated_refit(_served(saturated=True), refit, profile)

    assert saturated_refit(_served(saturated=False), refit, profile) is None
    assert why is not None and "served 90.0 req/s of 140.0 sent" in why
    assert re.search(r"up to \+19\d %", why)  # 400 batches against 20 runs: ~95 % of +200 %


def test_a_timed_runs_refit_leaves_the_timer_probes_extra_to_serving() -> None:
    """With a timeout the simulator adds the timer probes' extra for the batch's size
    (`timed_extra_by_size`), so a Verify's refit takes it off its runner times: a run as slow as
    the profile plus that extra leaves the model's speed where it was."""
    base = measured_profile()
    largest = SIZES[-1]
    extra_ms = 0.5 * base.latency_ms(largest)
    profile = base.model_copy(
        update={
            "timed_rate": 10.0,
            "timed_extra_ms": 0.0,
            "timed_batch": 1.0,
            "timed_delays_ms": [0.0],
            "timed_load": [(100.0, extra_ms, [0.0], float(largest))],
        }
    )
    factor = 1 + extra_ms / profile.latency_ms(largest)  # the runs' time with the extra in it
    trace = slower_trace(profile, factor, {largest: 400})

    timed = recalibrate(profile, trace, timeout_ms=2.0)
    untimed = recalibrate(profile, trace, timeout_ms=0.0)

    assert timed.latency_ms(largest) / profile.latency_ms(largest) == pytest.approx(1.0, abs=0.04)
    assert untimed.latency_ms(largest) / profile.latency_ms(largest) > 1.3


def served_trace(profile: LatencyProfile, factor: float, count: int) -> list[BatchRecord]:
    """Batches of 1, one after another on one instance with 50-ms idle gaps, each taking the
    profile's latency times `factor` plus what the profile expects serving to add to it: the
    idle extra after its gap (none for the first) and the served extra."""
    batches, now, gap_ms = [], 0.0, 50.0
    for k in range(count):
        idle = profile.idle_extra(gap_ms) if k else 0.0
        run = (profile.latency_ms(1) * factor + idle + profile.served_extra_ms) / 1000
        batches.append(BatchRecord(0, 1, 1, now, now, now, now + run))
        now += run + gap_ms / 1000
    return batches


@pytest.mark.parametrize("factor", [1.0, 1.5])
def test_the_served_slowdown_takes_off_what_serving_is_expected_to_add(factor: float) -> None:
    profile = measured_profile().model_copy(
        update={"idle_extra_ms": [(20.0, 4.0)], "served_extra_ms": 3.0}
    )  # a batch-1 call after an idle gap: 10 ms bare, 17 ms served as the profile expects
    batches = served_trace(profile, factor, 200)
    run = LoadRun(result=_served(saturated=False), batches=batches)

    assert served_slowdown(profile, run) == pytest.approx(factor, rel=0.01)
    assert overall_slowdown(batches, profile) > factor + 0.5  # the bare ratio counts them as slow
