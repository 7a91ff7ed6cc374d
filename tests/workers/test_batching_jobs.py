"""The latency profile and verify jobs through run_job on a real SQLite database (no broker)."""

from __future__ import annotations

import pytest

from optistudio.core.batching.latency import QUICK_PROBE_SCALE as QUICK
from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.specs import BatchingVerifySpec, LatencyProfileSpec
from optistudio.db.models import Job, JobKind, JobStatus
from optistudio.services.jobkinds import BATCHING_VERIFY, LATENCY_PROFILE
from tests.workers.conftest import finished_job


def _profiled(factory, model_id: int) -> Job:  # type: ignore[no-untyped-def]
    """A finished latency profile job of the model, up to batch 4 (a quick one: these tests
    check what the jobs do with it, not its figures)."""
    spec = LatencyProfileSpec(max_batch_size=4, min_seconds=0.05, probe_time_scale=QUICK)
    return finished_job(factory, JobKind.latency_profile, model_id, spec)


@pytest.fixture
def stored(store_model, make_model):  # type: ignore[no-untyped-def]
    def store(**kwargs: object) -> int:
        return store_model(make_model(**kwargs))

    return store


@pytest.mark.timing
def test_profile_job_stores_a_profile_the_simulator_reads(db_factory, stored) -> None:  # type: ignore[no-untyped-def]
    spec = LatencyProfileSpec(max_batch_size=4, min_seconds=0.05, probe_time_scale=QUICK)

    job = finished_job(db_factory, JobKind.latency_profile, stored(), spec)

    assert job.status == JobStatus.succeeded, job.message
    profile = LatencyProfile.model_validate(job.result["profile"])
    assert profile.batch_sizes == [1, 2, 4] and job.result["ceiling"] > 0
    # the hand-back per batch as measured, or none and why (no two batches back to back)
    if profile.handoff_ms is None:
        assert "could not be measured here" in profile.unmeasured["handoff_ms"]
        assert profile.unmeasured["handoff_ms"] in job.message  # said, not hidden
    else:
        assert profile.handoff_ms >= 0 and "handoff_ms" not in profile.unmeasured
        assert f"; {profile.handoff_ms:.2f} ms hand-back" in job.message
    for why in profile.unmeasured.values():  # any other probe that could not measure
        assert why in job.message
    assert job.environment_id is not None
    assert profile.probe_time_scale == QUICK and profile.quick_note() in job.message


def test_verify_job_stores_measured_figures_and_samples(db_factory, stored) -> None:  # type: ignore[no-untyped-def]
    spec = BatchingVerifySpec(
        settings=BatchingSettings(max_batch_size=4, timeout_ms=1), rate=200, seconds=0.5
    )

    job = finished_job(db_factory, JobKind.batching_verify, stored(), spec)

    assert job.status == JobStatus.succeeded, job.message
    measured = job.result["measured"]
    assert measured["completed"] > 50 and measured["p50_ms"] <= measured["p99_ms"]
    assert len(job.result["requests"]["latency_ms"]) == measured["completed"]
    runner = job.result["batches"]["runner"]  # per batch size: [batches, mean runner ms]
    assert sum(int(rows) * count for rows, (count, _) in runner.items()) == measured["completed"]
    assert set(map(int, runner)) <= {1, 2, 3, 4} and all(ms > 0 for _, ms in runner.values())
    assert job.result["p99_halves_ms"] is None  # ~100 requests: too few to split in two
    typed = BATCHING_VERIFY.parse_result(job.result)
    assert typed.batches is not None and sum(n for n, _ in typed.batches.runner.values()) > 0


def test_a_batch_fixed_at_1_is_profiled_and_served_through_its_checked_rewrite(
    db_factory, stored
) -> None:  # type: ignore[no-untyped-def]
    model_id = stored(batch=1)
    spec = LatencyProfileSpec(max_batch_size=4, min_seconds=0.05, probe_time_scale=QUICK)
    job = finished_job(db_factory, JobKind.latency_profile, model_id, spec)

    assert job.status == JobStatus.succeeded, job.message
    assert "batch is fixed at 1: batched a rewrite" in job.message
    assert LatencyProfile.model_validate(job.result["profile"]).batch_sizes == [1, 2, 4]
    verify = BatchingVerifySpec(
        settings=BatchingSettings(max_batch_size=4, timeout_ms=1), rate=100, seconds=0.3
    )
    served = finished_job(db_factory, JobKind.batching_verify, model_id, verify)
    assert served.status == JobStatus.succeeded, served.message
    assert "batch is fixed at 1" in served.message


def test_model_without_batch_dim_fails_the_job_with_why(db_factory, stored) -> None:  # type: ignore[no-untyped-def]
    spec = LatencyProfileSpec(max_batch_size=4)

    job = finished_job(db_factory, JobKind.latency_profile, stored(batch=2), spec)

    assert job.status == JobStatus.failed
    assert "does not apply" in job.message and job.error_detail is None


def test_verify_refits_the_profile_in_use_and_stores_it(db_factory, stored, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Each Verify predicts its run from the profile in use, then stores that profile refitted
    from its own batches; the next Verify rests on the refit, not on the bare profile.

    The runs are read as not saturated: far below this model's knee none is, but on a loaded
    machine one stall of the serving threads near a 0.5-s run's end leaves its last answer
    more than 3 % of the span late, which reads as a growing queue and keeps the refit out
    (`test_a_saturated_verify_keeps_its_batches_but_not_its_refit`)."""
    from dataclasses import replace

    from optistudio.workers import batching_jobs

    real = batching_jobs.measure_load

    def unsaturated(*args, **kwargs):  # type: ignore[no-untyped-def]
        run = real(*args, **kwargs)
        return replace(run, result=run.result.model_copy(update={"saturated": False}))

    monkeypatch.setattr(batching_jobs, "measure_load", unsaturated)
    model_id = stored()
    profiled = _profiled(db_factory, model_id)
    settings = BatchingSettings(max_batch_size=4, timeout_ms=1)
    first, second = (
        finished_job(
            db_factory,
            JobKind.batching_verify,
            model_id,
            BatchingVerifySpec(settings=settings, rate=rate, seconds=0.5, seed=seed),
        )
        for rate, seed in ((60, 0), (120, 1))  # far below this model's knee: none saturates
    )

    assert first.status == second.status == JobStatus.succeeded, (first.message, second.message)
    one = BATCHING_VERIFY.parse_result(first.result).prediction
    two = BATCHING_VERIFY.parse_result(second.result).prediction
    assert one is not None and two is not None
    assert one.profile_job == two.profile_job == profiled.id
    assert one.rests_on == f"the profile from job #{profiled.id}, as measured"
    assert one.calibrated.calibration is not None
    assert one.calibrated.calibration.verify == f"Verify #{first.id}"
    assert f"recalibrated by Verify #{first.id}" in two.rests_on
    assert two.calibrated.calibration is not None
    assert two.calibrated.calibration.previous == [f"Verify #{first.id}"]
    band = one.band
    assert band.p99_low_ms <= band.p99_high_ms and band.seconds == 0.5
    assert one.predicted.offered_rate == 60 and one.recalibrated is not None
    assert one.not_adopted is None and two.not_adopted is None
    assert one.on_arrivals is not None and one.arrivals_band is not None  # its own send times
    assert (
        one.arrivals_band.requests == BATCHING_VERIFY.parse_result(first.result).measured.completed
    )
    assert "profile recalibrated" in first.message


def test_verify_without_a_profile_measures_and_predicts_nothing(db_factory, stored) -> None:  # type: ignore[no-untyped-def]
    spec = BatchingVerifySpec(
        settings=BatchingSettings(max_batch_size=4, timeout_ms=1), rate=100, seconds=0.3
    )

    job = finished_job(db_factory, JobKind.batching_verify, stored(), spec)

    assert job.status == JobStatus.succeeded, job.message
    assert BATCHING_VERIFY.parse_result(job.result).prediction is None


def test_a_saturated_verify_keeps_its_batches_but_not_its_refit(  # type: ignore[no-untyped-def]
    db_factory, stored, monkeypatch
) -> None:
    """The run's summary says the queue kept growing (as measure_load sets it when arrivals
    outpace service): the profile in use is stored unchanged, and the result says why."""
    from dataclasses import replace

    from optistudio.workers import batching_jobs

    real = batching_jobs.measure_load

    def saturated(*args, **kwargs):  # type: ignore[no-untyped-def]
        run = real(*args, **kwargs)
        return replace(run, result=run.result.model_copy(update={"saturated": True}))

    monkeypatch.setattr(batching_jobs, "measure_load", saturated)
    model_id = stored()
    profiled = _profiled(db_factory, model_id)
    spec = BatchingVerifySpec(
        settings=BatchingSettings(max_batch_size=4, timeout_ms=1), rate=60, seconds=0.5
    )

    job = finished_job(db_factory, JobKind.batching_verify, model_id, spec)

    assert job.status == JobStatus.succeeded, job.message
    prediction = BATCHING_VERIFY.parse_result(job.result).prediction
    assert prediction is not None and prediction.not_adopted is not None
    assert prediction.not_adopted.startswith("Not recalibrated: this run was saturated")
    assert prediction.calibrated.calibration is None  # the profile as measured, unchanged
    assert prediction.calibrated == LatencyProfile.model_validate(
        LATENCY_PROFILE.parse_result(profiled.result).profile.model_dump()
    )
    assert "not recalibrated (saturated run)" in job.message
