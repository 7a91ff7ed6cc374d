"""The simulator checked against the profile's own served probes (`served_checks`), and bands
that hold its errors (`simulate_band`): a profile whose probes measured a p99 1.5x the simulated
one bands settings of the same kind (with a timeout or without) up to 1.5x its own top, and
only those; probes that erred 0.9x and 1.3x stretch both ends; a refitted profile, a check of too few requests, and a run that did not keep up
widen nothing. Each probe is replayed at the machine's speed beside it, and the bands' draws
run the model at the paces those speeds span (`LatencyProfile.probe_speeds`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from optistudio.core.batching.handoff import ServedRun
from optistudio.core.batching.latency import (
    CHECK_MIN_REQUESTS,
    Calibration,
    LatencyProfile,
    ServedCheck,
)
from optistudio.core.batching.latency_profile import measure_latency_profile
from optistudio.core.batching.loadgen import LoadRun
from optistudio.core.batching.results import BatchRecord, summarize
from optistudio.core.batching.served_checks import served_checks
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.simulate import simulate, simulate_band

TIMED = BatchingSettings(max_batch_size=8, timeout_ms=2.0)
UNTIMED = BatchingSettings(max_batch_size=8, timeout_ms=0.0)


def _check(error: float, *, timeout_ms: float = 2.0, requests: int = 500) -> ServedCheck:
    return ServedCheck(
        rate=300.0, timeout_ms=timeout_ms, max_batch_size=8, requests=requests,
        measured_p99_ms=4.0 * error, simulated_p99_ms=4.0,
    )  # fmt: skip


def _profile(*checks: ServedCheck) -> LatencyProfile:
    return LatencyProfile(
        batch_sizes=[1, 2, 4, 8], mean_ms=[1.0, 1.4, 2.2, 3.8], served_checks=list(checks)
    )


def test_the_error_is_the_median_of_the_checks_of_its_kind_with_enough_requests() -> None:
    profile = _profile(
        _check(1.5), _check(1.2), _check(3.0, requests=CHECK_MIN_REQUESTS - 1),
        _check(0.8, timeout_ms=0.0),
    )  # fmt: skip

    assert profile.served_error(timed=True) == pytest.approx(1.35)
    assert profile.served_error(timed=False) == pytest.approx(0.8)
    assert _profile(_check(1.5)).served_error(timed=False) is None
    assert _profile().served_error(timed=True) is None


def test_more_instances_take_their_own_probes_errors_beside_one_instances() -> None:
    two = _check(3.0, timeout_ms=0.0).model_copy(update={"instances": 2})
    profile = _profile(_check(1.2), _check(0.9, timeout_ms=0.0), two)

    assert profile.served_errors(timed=True) == [pytest.approx(1.2)]  # one instance's only
    assert profile.served_errors(timed=True, instances=2) == [
        pytest.approx(1.2), pytest.approx(3.0)
    ]  # fmt: skip
    assert profile.served_errors(timed=False, instances=4) == [
        pytest.approx(0.9),
        pytest.approx(3.0),
    ]  # fmt: skip  (four served no better than the two measured)
    one, both = (
        simulate_band(profile, UNTIMED.model_copy(update={"instances": n}), rate=200.0)
        for n in (1, 2)
    )
    assert both.served_error_range == [pytest.approx(0.9), pytest.approx(3.0)]
    assert one.served_error_range == [pytest.approx(0.9), pytest.approx(0.9)]


def test_a_band_holds_the_prediction_moved_by_each_checks_error_of_its_kind() -> None:
    profile = _profile(
        _check(0.9), _check(1.02), _check(1.3), _check(2.0, requests=CHECK_MIN_REQUESTS - 1),
        _check(0.5, timeout_ms=0.0),
    )  # fmt: skip

    plain = simulate_band(profile, TIMED, rate=900, seconds=2, served_error=False)
    band = simulate_band(profile, TIMED, rate=900, seconds=2)

    assert profile.served_errors(timed=True) == pytest.approx([0.9, 1.02, 1.3])
    assert band.served_error_range == pytest.approx([0.9, 1.3])
    assert band.served_error == pytest.approx(1.02)
    assert band.p99_low_ms == pytest.approx(plain.p99_low_ms * 0.9)
    assert band.p99_high_ms == pytest.approx(plain.p99_high_ms * 1.3)


def test_a_refitted_profile_is_judged_by_its_verify_not_by_its_probes() -> None:
    refitted = _profile(_check(1.5)).model_copy(
        update={"calibration": Calibration(verify="Verify #3", batches=40, p50_moved={})}
    )

    assert refitted.served_error(timed=True) is None and refitted.served_errors(timed=True) == []


@pytest.mark.parametrize("error", [1.5, 0.7])
def test_a_band_of_the_same_kind_holds_the_prediction_moved_by_the_error(error: float) -> None:
    profile = _profile(_check(error))

    plain = simulate_band(profile, TIMED, rate=900, seconds=2, served_error=False)
    band = simulate_band(profile, TIMED, rate=900, seconds=2)

    assert band.served_error == pytest.approx(error)
    assert band.served_error_range == pytest.approx([error, error])
    assert band.p99_low_ms == pytest.approx(min(plain.p99_low_ms, plain.p99_low_ms * error))
    assert band.p99_high_ms == pytest.approx(max(plain.p99_high_ms, plain.p99_high_ms * error))
    assert band.p99_ms == plain.p99_ms  # the headline stays the simulator's
    assert (band.p50_low_ms, band.p50_high_ms) == (plain.p50_low_ms, plain.p50_high_ms)


def test_a_band_of_the_other_kind_is_not_widened() -> None:
    profile = _profile(_check(1.5))

    band = simulate_band(profile, UNTIMED, rate=900, seconds=2)

    assert band.served_error is None
    assert band == simulate_band(profile, UNTIMED, rate=900, seconds=2, served_error=False)


def _run(profile: LatencyProfile, settings: BatchingSettings, rate: float, *, slower: float):
    """A served run of 400 Poisson requests whose every answer took `slower` x what the
    simulator gives them on the same send times."""
    gaps = np.random.default_rng(4).exponential(1 / rate, 400)
    sent = np.cumsum(gaps) - gaps[0]
    twin = simulate(profile, settings, arrivals=sent, warmup_share=0.0)
    started = sent + 0.001
    finished = sent + (twin.p99_ms / 1000) * slower * np.linspace(0.2, 1.0, len(sent))
    result = summarize(
        sent.tolist(), started.tolist(), finished.tolist(), [1] * len(sent), rate=rate,
        warmup_share=0.0,
    )  # fmt: skip
    batch = BatchRecord(0, 1, 1, 0.0, 0.0, 0.0, 0.001)
    return LoadRun(result=result, sent_ms=(sent * 1000).tolist(), batches=[batch])


def test_each_kept_up_run_is_replayed_on_its_own_send_times() -> None:
    profile = _profile()
    kept = ServedRun(TIMED, 300.0, _run(profile, TIMED, 300.0, slower=2.0))
    saturated_run = _run(profile, UNTIMED, 300.0, slower=2.0)
    saturated_run.result = saturated_run.result.model_copy(update={"saturated": True})
    silent = ServedRun(UNTIMED, 300.0, LoadRun(result=kept.run.result, sent_ms=kept.run.sent_ms))

    checks = served_checks(profile, [kept, ServedRun(UNTIMED, 300.0, saturated_run), silent])

    assert len(checks) == 1  # the saturated run and the one with no batch are left out
    check = checks[0]
    sent = [ms / 1000 for ms in kept.run.sent_ms]
    assert check.simulated_p99_ms == pytest.approx(
        simulate(profile, TIMED, arrivals=sent, warmup_share=0.0).p99_ms, rel=1e-3
    )
    assert check.measured_p99_ms == pytest.approx(kept.run.result.p99_ms, rel=1e-3)
    assert (check.timeout_ms, check.max_batch_size, check.requests) == (2.0, 8, 400)
    assert check.error > 1.0


def test_a_profile_keeps_a_check_for_its_serving_probes(tiny_model: Path) -> None:
    profile = measure_latency_profile(
        tiny_model, max_batch_size=4, min_seconds=0.02, instances=[1], probe_time_scale=0.1
    )

    assert profile.served_checks
    assert {check.timeout_ms > 0 for check in profile.served_checks} == {True, False}
    assert all(
        check.max_batch_size == 4 and check.measured_p99_ms > 0 and check.simulated_p99_ms > 0
        for check in profile.served_checks
    )
    assert profile.probe_speeds and all(speed > 0 for speed in profile.probe_speeds)
    assert len(profile.probe_speeds) >= len(profile.served_checks)
    stored = LatencyProfile.model_validate_json(profile.model_dump_json())
    assert stored.served_checks == profile.served_checks
    assert stored.probe_speeds == profile.probe_speeds


def test_a_probe_is_replayed_with_the_model_at_the_machines_speed_then() -> None:
    profile = _profile()
    run = _run(profile, TIMED, 300.0, slower=1.0)

    check = served_checks(profile, [ServedRun(TIMED, 300.0, run, speed=1.5)])[0]

    sent = [ms / 1000 for ms in run.sent_ms]
    at_speed = simulate(profile.scaled(1.5), TIMED, arrivals=sent, warmup_share=0.0)
    assert check.speed == 1.5
    assert check.simulated_p99_ms == pytest.approx(at_speed.p99_ms, rel=1e-3)
    assert check.simulated_p99_ms > simulate(profile, TIMED, arrivals=sent, warmup_share=0.0).p99_ms


def test_a_band_runs_its_draws_at_the_paces_the_machine_had_beside_the_probes() -> None:
    plain = _profile()
    paced = plain.model_copy(update={"probe_speeds": [0.7, 1.5]})

    before = simulate_band(plain, UNTIMED, rate=1200, seconds=2)
    band = simulate_band(paced, UNTIMED, rate=1200, seconds=2)

    assert before.paces is None
    assert band.paces == pytest.approx([1 / 1.5, 1.5])  # each speed and its inverse
    assert band.p99_high_ms > before.p99_high_ms
    assert band.p99_low_ms < before.p99_low_ms


def test_a_band_holds_the_machine_as_much_faster_as_the_probes_ran_slower() -> None:
    plain = _profile()
    slow = plain.model_copy(update={"probe_speeds": [1.3, 1.3]})  # every probe ran slower

    assert slow.paces() == pytest.approx([1.0, 1.3, 1.3, 1 / 1.3, 1 / 1.3])
    before = simulate_band(plain, UNTIMED, rate=1200, seconds=2)
    band = simulate_band(slow, UNTIMED, rate=1200, seconds=2)

    assert band.paces == pytest.approx([1 / 1.3, 1.3])
    assert band.p99_low_ms < before.p99_low_ms  # the faster side reaches the bottom too
    assert band.p99_high_ms > before.p99_high_ms


def test_paces_of_one_draw_the_band_a_profile_without_them_draws() -> None:
    plain = _profile()
    still = plain.model_copy(update={"probe_speeds": [1.0, 1.0]})

    before = simulate_band(plain, TIMED, rate=900, seconds=2)
    band = simulate_band(still, TIMED, rate=900, seconds=2)

    assert band.paces == [1.0, 1.0]
    assert band.model_copy(update={"paces": None}) == before
    with pytest.raises(ValueError, match="probe_speeds"):
        LatencyProfile.model_validate({**plain.model_dump(), "probe_speeds": [0.0]})


def test_a_machine_at_a_pace_runs_its_serving_threads_at_that_pace_too() -> None:
    profile = _profile().model_copy(
        update={
            "handoff_ms": 0.2, "handoff_gaps_ms": [0.1, 0.3], "idle_extra_ms": [(20.0, 0.1)],
            "served_extra_ms": 0.05, "served_extra_load": [(100.0, 0.05), (900.0, 0.4)],
            "serving_delays_ms": [0.1], "serving_delays_load": [(900.0, [0.3])],
            "request_ms": 0.02, "timer_late_ms": [0.2], "timed_rate": 300.0,
            "timed_extra_ms": 0.1, "timed_delays_ms": [0.2], "timed_calls": [(4, 0.3)],
            "timed_load": [(800.0, 0.5, [0.4], 6.0)],
        }
    )  # fmt: skip

    slow = profile.at_pace(2.0)

    assert slow.mean_ms == [2 * ms for ms in profile.mean_ms]
    assert (slow.handoff_ms, slow.handoff_gaps_ms) == (0.4, [0.2, 0.6])
    assert slow.idle_extra_ms == [(20.0, 0.2)]  # the idle gap is the input, not a cost
    assert (slow.served_extra_ms, slow.served_extra_load) == (0.1, [(100.0, 0.1), (900.0, 0.8)])
    assert (slow.serving_delays_ms, slow.serving_delays_load) == ([0.2], [(900.0, [0.6])])
    assert (slow.request_ms, slow.timer_late_ms, slow.timed_extra_ms) == (0.04, [0.4], 0.2)
    assert (slow.timed_delays_ms, slow.timed_calls) == ([0.4], [(4, 0.6)])
    assert slow.timed_load == [(800.0, 1.0, [0.8], 6.0)]
    assert slow.timed_rate == 300.0  # rates are the load's, not the machine's
    assert profile.runtime_scaled(2.0).mean_ms == profile.mean_ms
    with pytest.raises(ValueError, match="positive"):
        profile.runtime_scaled(0.0)


def test_a_band_drawn_at_a_slower_pace_holds_serving_threads_that_fall_behind() -> None:
    # the serving machinery, not the model, sets this ceiling: 1 / 0.2 ms = 5,000 req/s
    capped = LatencyProfile(batch_sizes=[1, 8], mean_ms=[0.02, 0.05], request_ms=0.2)
    paced = capped.model_copy(update={"probe_speeds": [1.3]})  # one probe ran 1.3x slower

    plain = simulate_band(capped, UNTIMED, rate=4200, seconds=2)
    band = simulate_band(paced, UNTIMED, rate=4200, seconds=2)

    # at 1.3x the machinery passes 3,850 req/s: the queue grows for the whole draw
    assert band.p99_high_ms > 10 * plain.p99_high_ms
    assert band.p99_low_ms <= plain.p99_low_ms
