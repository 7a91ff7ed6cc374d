"""The Verify policy: which profile is in use, what it predicts, and when a refit is adopted."""

from __future__ import annotations

import numpy as np
import pytest

from optistudio.core.batching import verify_policy
from optistudio.core.batching.latency import QUANTILE_COUNT, LatencyProfile
from optistudio.core.batching.loadgen import LoadRun
from optistudio.core.batching.results import BatchRecord, LoadResult
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.specs import BatchingVerifySpec

SIZES = [1, 2, 4]
BASE_MS = {1: 10.0, 2: 14.0, 4: 22.0}


def _profile(factor: float = 1.0) -> LatencyProfile:
    rng = np.random.default_rng(0)
    runs = [(b, factor * BASE_MS[b] * rng.uniform(0.9, 1.1)) for _ in range(20) for b in SIZES]
    rows = [[ms for size, ms in runs if size == b] for b in SIZES]
    return LatencyProfile(
        batch_sizes=SIZES,
        mean_ms=[float(np.mean(r)) for r in rows],
        p50_ms=[float(np.percentile(r, 50)) for r in rows],
        p99_ms=[float(np.percentile(r, 99)) for r in rows],
        quantiles_ms=[np.percentile(r, np.linspace(0, 100, QUANTILE_COUNT)).tolist() for r in rows],
        runs=runs,
    )


def _spec() -> BatchingVerifySpec:
    return BatchingVerifySpec(
        settings=BatchingSettings(max_batch_size=4, timeout_ms=2.0), rate=20.0, seconds=5.0
    )


def _run(factor: float, *, saturated: bool) -> LoadRun:
    """A run whose batches (two rows each) took `factor` times the profile's batch-2 time."""
    batches, sent, now = [], [], 0.0
    for _ in range(200):
        took = factor * BASE_MS[2] / 1000
        batches.append(BatchRecord(0, 2, 2, now, now, now, now + took))
        sent += [now * 1000, now * 1000]
        now += 0.1
    result = LoadResult(
        throughput=19.0, p50_ms=20.0, p90_ms=25.0, p99_ms=30.0, mean_ms=21.0,
        mean_queue_ms=3.0, mean_compute_ms=factor * BASE_MS[2], mean_batch_size=2.0,
        completed=400, offered_rate=20.0, realised_rate=20.0, saturated=saturated,
    )  # fmt: skip
    return LoadRun(result=result, sent_ms=sent, batches=batches)


def _prediction(profile_job: int, calibrated: LatencyProfile) -> verify_policy.VerifyPrediction:
    spec, profile = _spec(), _profile()
    before = verify_policy.predict_before(spec, profile_job, profile)
    assert before is not None
    refit = verify_policy.refit_after(
        spec, _run(1.0, saturated=False), before, profile_job, profile, verify="Verify #9"
    )
    assert refit is not None
    return refit.model_copy(update={"calibrated": calibrated})


def test_the_newest_refit_of_the_profile_job_before_this_run_is_in_use() -> None:
    measured, first, second, other = _profile(), _profile(1.1), _profile(1.2), _profile(3.0)
    verifies = [
        (12, _prediction(10, second)),
        (11, _prediction(10, first)),
        (13, _prediction(5, other)),  # another profile job's chain
        (14, None),  # a Verify that could not predict
        (20, _prediction(10, other)),  # after this run
    ]

    profile, refit = verify_policy.profile_in_use(10, measured, verifies, before_job=15)
    alone, none = verify_policy.profile_in_use(10, measured, [], before_job=15)

    assert refit is not None and refit.job == 12 and profile == second
    assert alone == measured and none is None


def test_a_refit_is_adopted_from_a_run_the_profile_did_not_keep_up_with() -> None:
    spec, profile = _spec(), _profile()
    before = verify_policy.predict_before(spec, 10, profile)
    assert before is not None and "as measured" in before.rests_on

    slower = verify_policy.refit_after(
        spec, _run(1.5, saturated=False), before, 10, profile, verify="Verify #11"
    )

    assert slower is not None and slower.not_adopted is None
    assert slower.calibrated.latency_ms(2) > profile.latency_ms(2) * 1.2
    assert slower.slowdown > 1.2
    assert slower.predicted == before.predicted and slower.profile_job == 10


def test_a_run_that_took_what_serving_adds_reads_as_the_profiles_own_speed() -> None:
    spec = _spec()
    profile = _profile().model_copy(update={"served_extra_ms": 0.5 * BASE_MS[2]})
    before = verify_policy.predict_before(spec, 10, profile)
    assert before is not None

    served = verify_policy.refit_after(  # 1.5x the bare batch-2 time: the served extra in it
        spec, _run(1.5, saturated=False), before, 10, profile, verify="Verify #12"
    )

    assert served is not None and served.slowdown == pytest.approx(1.0, abs=0.05)


def test_a_saturated_runs_refit_is_not_adopted_and_the_profile_stays() -> None:
    spec, profile = _spec(), _profile()
    before = verify_policy.predict_before(spec, 10, profile)
    assert before is not None

    saturated = verify_policy.refit_after(
        spec, _run(3.0, saturated=True), before, 10, profile, verify="Verify #11"
    )

    assert saturated is not None and saturated.not_adopted
    assert saturated.calibrated == profile
