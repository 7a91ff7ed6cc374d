"""What serving costs beyond the bare runs (`served_extra_ms`, `serving_delays_ms`): measured by a
light-rate probe through the real Pipeline when a model is profiled, added by the simulator (the
extra to every batch, a delay to every answer without holding the instance), kept out of a
Verify's refit, and absent in profiles stored before they were measured."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from optistudio.core.backends import LoadedModel
from optistudio.core.batching import handoff
from optistudio.core.batching.handoff import (
    SERVING_DELAYS,
    ServingProbe,
    measure_request_cost,
    measure_saturation,
    measure_served_extra_under_load,
    measure_serving,
    serving_delays,
)
from optistudio.core.batching.instances import InstanceLatency
from optistudio.core.batching.latency import QUICK_PROBE_SCALE, LatencyProfile
from optistudio.core.batching.latency_profile import measure_latency_profile
from optistudio.core.batching.loadgen import LoadRun, run_load
from optistudio.core.batching.pipeline import Pipeline
from optistudio.core.batching.recalibrate import calibration_line, recalibrate
from optistudio.core.batching.results import BatchRecord
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.simulate import simulate, simulate_band
from optistudio.core.model.info import TensorSpec

ONE = BatchingSettings(max_batch_size=1, timeout_ms=0)
TEN_MS = LatencyProfile(batch_sizes=[1], mean_ms=[10.0])


def test_a_serving_delay_reaches_every_answer_but_does_not_hold_the_instance() -> None:
    delayed = TEN_MS.model_copy(update={"serving_delays_ms": [5.0, 5.0]})

    light = simulate(delayed, ONE, rate=1, process="constant", requests=200)
    assert light.p50_ms == pytest.approx(15.0) and light.p99_ms == pytest.approx(15.0)
    # at 95 req/s a 10 ms batch leaves the instance free 5 % of the time; a delay that held it
    # for 5 ms more would saturate it
    busy = simulate(delayed, ONE, rate=95, process="constant", requests=4000)
    assert not busy.saturated
    assert busy.throughput == pytest.approx(95, rel=0.01)
    assert busy.p50_ms == pytest.approx(15.0)


def test_the_served_extra_holds_the_instance_and_lowers_the_ceiling() -> None:
    slower = TEN_MS.model_copy(update={"served_extra_ms": 2.5})

    assert simulate(slower, ONE, rate=1, process="constant", requests=200).p50_ms == (
        pytest.approx(12.5)
    )
    assert simulate(slower, ONE, rate=95, process="constant", requests=4000).saturated
    assert slower.ceiling(1, with_handoff=True)[0] == pytest.approx(1000 / 12.5)
    assert slower.ceiling(1)[0] == pytest.approx(100)  # the model's own ceiling is the model's


ONE_MS = LatencyProfile(batch_sizes=[1], mean_ms=[1.0], handoff_ms=0.0)
LOADED = ONE_MS.model_copy(
    update={"served_extra_ms": 0.0, "served_extra_load": [(100.0, 0.0), (900.0, 1.0)]}
)


def test_the_served_extra_grows_with_the_rate_between_its_two_measured_points() -> None:
    assert LOADED.served_extra_at(None) == 0.0  # no rate: the light one
    assert LOADED.served_extra_at(50) == 0.0 and LOADED.served_extra_at(2000) == 1.0  # flat
    assert LOADED.served_extra_at(500) == pytest.approx(0.5)
    # the ceiling is the rate served at its own extra: R = 1000 / (1 + (R - 100) / 800)
    assert LOADED.ceiling(1, with_handoff=True)[0] == pytest.approx(610.47, rel=1e-3)
    assert ONE_MS.ceiling(1, with_handoff=True)[0] == pytest.approx(1000)
    # 800 req/s: the runner's call takes 1.875 ms there, so the runtime falls behind
    assert simulate(LOADED, ONE, rate=800, requests=4000).saturated
    assert not simulate(ONE_MS, ONE, rate=800, requests=4000).saturated
    light = simulate(LOADED, ONE, rate=100, process="constant", requests=400)
    assert light.p50_ms == pytest.approx(1.0)  # at the light point's rate, its extra (none)
    with pytest.raises(ValueError, match="ascending"):
        LatencyProfile.model_validate(
            {**LOADED.model_dump(), "served_extra_load": [(900.0, 1.0), (100.0, 0.0)]}
        )


STALLING = ONE_MS.model_copy(
    update={
        "served_extra_load": [(100.0, 0.0), (500.0, 0.0)],
        "serving_delays_ms": [0.5] * 8,
        "serving_delays_load": [(500.0, [0.5] * 6 + [40.0] * 2)],  # stalls under load
    }
)


def test_serving_delays_are_drawn_from_the_sets_measured_around_the_rate() -> None:
    assert STALLING.serving_delays_at(None) == [0.5] * 8  # no rate: the light set
    assert (
        STALLING.serving_delays_at(50) == [0.5] * 8 and STALLING.serving_delays_at(100) == [0.5] * 8
    )
    assert sorted(STALLING.serving_delays_at(900)) == [0.5] * 6 + [40.0] * 2  # flat beyond
    halfway = STALLING.serving_delays_at(300)
    assert len(halfway) == 8 and halfway.count(40.0) == 1  # four of each set, one a stall
    # a quarter of the answers stall for 40 ms at 500 req/s: the p99 is the stall's, not the
    # light probe's; at the light rate none does
    heavy = simulate(STALLING, ONE, rate=500, requests=8000)
    assert heavy.p99_ms > 40
    assert simulate(STALLING, ONE, rate=100, requests=4000).p99_ms < 20
    light_only = STALLING.model_copy(update={"serving_delays_load": []})
    assert simulate(light_only, ONE, rate=500, requests=8000).p99_ms < 20
    with pytest.raises(ValueError, match="light probe"):
        LatencyProfile.model_validate(
            {**STALLING.model_dump(), "served_extra_load": [], "served_extra_ms": 0.0}
        )
    with pytest.raises(ValueError, match="ascending"):
        LatencyProfile.model_validate(
            {**STALLING.model_dump(), "serving_delays_load": [(500.0, [1.0]), (300.0, [1.0])]}
        )


def test_the_band_resamples_the_delays_under_load_too() -> None:
    band = simulate_band(STALLING, ONE, rate=500, seconds=10)
    assert band.p99_high_ms > 40


def test_every_request_passes_the_serving_machinery_in_turn() -> None:
    """With a model that takes no time, the machinery is an M/D/1 queue of its own: at 1 ms
    per request and 500 req/s the mean wait is rho D / (2 (1 - rho)) = 0.5 ms."""
    machinery = LatencyProfile(batch_sizes=[1], mean_ms=[1e-6], handoff_ms=0.0, request_ms=1.0)

    result = simulate(machinery, ONE, rate=500, requests=40_000, service="mean")

    assert result.mean_ms == pytest.approx(1.5, rel=0.05)
    assert machinery.ceiling(1, with_handoff=True)[0] == pytest.approx(1000)
    assert machinery.ceiling(1)[0] > 1e6  # the model's own ceiling leaves the machinery out
    assert simulate(machinery, ONE, rate=1100, requests=4000).saturated


def test_the_band_resamples_the_serving_delays() -> None:
    rng = np.random.default_rng(0)
    delayed = TEN_MS.model_copy(update={"serving_delays_ms": rng.exponential(2.0, 400).tolist()})

    band = simulate_band(delayed, ONE, rate=20, process="constant", seconds=20)
    plain = simulate_band(TEN_MS, ONE, rate=20, process="constant", seconds=20)

    assert plain.p99_low_ms == pytest.approx(10) and plain.p99_high_ms == pytest.approx(10)
    # an exponential delay of mean 2 ms has its 99th percentile at 2 ln 100 = 9.2 ms
    assert band.p99_low_ms < 10 + 9.2 < band.p99_high_ms


def test_a_verify_refit_leaves_the_served_extra_to_the_simulator() -> None:
    profile = TEN_MS.model_copy(update={"served_extra_ms": 2.0})
    runs = [BatchRecord(0, 1, 1, k * 1.0, k * 1.0, k * 1.0, k * 1.0 + 0.012) for k in range(50)]

    refit = recalibrate(profile, runs)

    assert refit.latency_ms(1) == pytest.approx(10.0, rel=0.02)  # 12 ms served = 10 + 2 extra
    assert refit.served_extra_ms == 2.0


def test_a_verify_refit_takes_off_the_served_extra_at_the_rate_it_served() -> None:
    profile = TEN_MS.model_copy(update={"served_extra_load": [(10.0, 0.0), (50.0, 4.0)]})
    runs = [BatchRecord(0, 1, 1, k * 0.02, k * 0.02, k * 0.02, k * 0.02 + 0.014) for k in range(50)]
    served = simulate(TEN_MS, ONE, rate=50, process="constant", requests=50)  # any result
    run = LoadRun(result=served.model_copy(update={"realised_rate": 50.0}), batches=runs)

    refit = recalibrate(profile, run)

    assert refit.latency_ms(1) == pytest.approx(10.0, rel=0.02)  # 14 ms at 50/s = 10 + 4 extra


class _SlowWhenServed(LoadedModel):
    """A runner whose call takes 4 ms: a profile that says 1 ms leaves 3 ms to serving."""

    details: dict[str, object] = {}

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        time.sleep(0.004)
        return [feeds["x"]]


SLOW_PROBE = ServingProbe(
    _SlowWhenServed(),
    [TensorSpec(name="x", dtype="float32", shape=["batch", 4])],
    [{"x": np.full((1, 4), i, dtype=np.float32)} for i in range(4)],
    max_batch_size=2,
)


@pytest.mark.timing
def test_the_probe_finds_a_runner_slower_served_than_profiled() -> None:
    profiled = LatencyProfile(batch_sizes=[1, 2], mean_ms=[1.0, 1.5], handoff_ms=0.1)

    extra, delays = measure_serving(SLOW_PROBE, profiled)

    assert extra >= 2.0  # sleep(4 ms) never takes less than 4 ms
    assert 0 < len(delays) <= SERVING_DELAYS
    assert all(np.isfinite(delays))


@pytest.mark.timing
def test_serving_delays_are_each_answers_own_under_load() -> None:
    """Under load the delays are each answer's time beyond its own queue wait and runner call,
    never less than nothing. Taken as its latency less a replay of the run's send times and
    runner calls, they were not: the replay cut other batches than the run, and a request that
    waited less in the replay than it did read as a delay of up to +45 ms, one that waited more
    as a negative one."""
    settings = BatchingSettings(max_batch_size=4, timeout_ms=0)
    probe = SLOW_PROBE
    with Pipeline([probe.model.run], probe.inputs, settings) as pipeline:  # 4 ms a batch
        run = run_load(pipeline, probe.requests, process="poisson", rate=600, seconds=1.5, seed=3)

    assert len(run.delays_ms) == len(run.latency_ms) > 0
    delays = serving_delays(run, LatencyProfile(batch_sizes=[1], mean_ms=[4.0]))
    assert min(delays) >= -1e-6
    assert run.result.mean_batch_size > 1.5  # under load: batches formed in the queue


@pytest.mark.timing
def test_a_heavy_probe_that_falls_behind_keeps_no_point() -> None:
    """A runner that takes 4 ms where the profile says 1 ms cannot keep up with 80 % of the
    profiled ceiling: its queue grows, and the extra it shows is saturation's, not the rate's.
    Profiled twice as slow as its sleep, it keeps up even where a loaded machine's sleeps
    overrun (4 ms a batch profiled would ask it to keep a pace that a 1 ms overrun misses)."""
    profiled = LatencyProfile(batch_sizes=[1, 2], mean_ms=[1.0, 1.5], handoff_ms=0.1)

    point = measure_served_extra_under_load(SLOW_PROBE, profiled)

    assert point is None
    kept_up = measure_served_extra_under_load(SLOW_PROBE, profiled.scaled(8.0))
    assert kept_up is not None  # profiled slower than it runs: a point with its answers' delays
    rate, extra, delays = kept_up
    assert rate > 0 and extra >= 0 and 0 < len(delays) <= SERVING_DELAYS


def test_the_request_probe_gives_a_pace_or_says_why_it_could_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A probe rate the machinery keeps up with measures the schedule, not the machinery: then
    the next rate is tried, and when every one was kept up with the result gives no number and
    says why. A rate the machinery falls behind gives its pace. (The machinery's speed is the
    machine's, so the runs here are stand-ins that keep up below 30,000 req/s.)"""
    sent: list[float] = []

    def run_load(pipeline: object, requests: object, *, rate: float, **_: object) -> object:
        sent.append(rate)
        served = min(rate, 30_000.0)
        result = SimpleNamespace(throughput=served, saturated=rate > served, realised_rate=rate)
        return SimpleNamespace(result=result)

    monkeypatch.setattr(handoff, "run_load", run_load)
    inputs, requests = SLOW_PROBE.inputs, SLOW_PROBE.requests
    monkeypatch.setattr(handoff, "REQUEST_PROBE_RATES", (1_000.0, 20_000.0))
    kept_up = measure_request_cost(inputs, requests, max_batch_size=4)
    assert kept_up.ms is None and sent == [1_000.0, 20_000.0]
    assert kept_up.unmeasured == handoff.REQUEST_UNMEASURED.format(rate=20_000.0)
    assert "could not be measured here" in kept_up.unmeasured

    sent.clear()
    monkeypatch.setattr(handoff, "REQUEST_PROBE_RATES", (1_000.0, 40_000.0, 80_000.0))
    fell_behind = measure_request_cost(inputs, requests, max_batch_size=4)
    assert fell_behind.unmeasured is None and sent == [1_000.0, 40_000.0]
    assert fell_behind.ms == pytest.approx(1000 / 30_000.0)


@pytest.mark.timing
def test_a_profile_carries_its_serving_costs_and_one_stored_before_them_loads(
    tiny_model: Path,
) -> None:
    profile = measure_latency_profile(
        tiny_model, max_batch_size=4, min_runs=5, min_seconds=0, probe_time_scale=QUICK_PROBE_SCALE
    )

    assert profile.served_extra_ms >= 0
    assert 0 < len(profile.serving_delays_ms) <= SERVING_DELAYS
    # the serving machinery's time per request with no model, or why it could not be measured
    assert (profile.request_ms > 0) != ("request_ms" in profile.unmeasured)
    assert (profile.handoff_ms is None) == ("handoff_ms" in profile.unmeasured)
    if profile.served_extra_load:  # the light point first, then the heavy, the saturation's
        (light, extra), *_ = profile.served_extra_load
        rates = [rate for rate, _ in profile.served_extra_load]
        assert len(rates) >= 2 and extra == profile.served_extra_ms
    if profile.serving_delays_load:  # the heavy probe's answers' delays, at its rate
        (delays_rate, delays), *_ = profile.serving_delays_load
        assert delays_rate > light and 0 < len(delays) <= SERVING_DELAYS
    assert "steal_share" in profile.environment  # None where the OS has no steal counter
    assert profile.environment["other_cores"] >= 0
    assert LatencyProfile.model_validate_json(profile.model_dump_json()) == profile
    before = {"served_extra_ms", "serving_delays_ms", "served_extra_load", "serving_delays_load"}
    old = json.loads(profile.model_dump_json(exclude=before))
    stored = LatencyProfile.model_validate(old)
    assert stored.served_extra_ms == 0 and stored.serving_delays_ms == []


def _verify_run(rate: float, answer_ms: float, *, closed: bool = False) -> LoadRun:
    """A run at `rate` req/s of one-row batches that ran 10 ms each, every answer `answer_ms`
    after its send (none waited in a queue)."""
    sent = [k / rate for k in range(100)]
    batches = [BatchRecord(0, 1, 1, t, t, t, t + 0.010) for t in sent]
    result = simulate(TEN_MS, ONE, rate=rate, process="constant", requests=100)
    result = result.model_copy(update={"realised_rate": None if closed else rate})
    return LoadRun(
        result=result, sent_ms=[t * 1000 for t in sent], latency_ms=[answer_ms] * 100,
        delays_ms=[answer_ms - 10.0] * 100, batches=batches,
    )  # fmt: skip


def test_a_verify_leaves_its_answers_delays_at_the_rate_it_served() -> None:
    profile = TEN_MS.model_copy(update={"serving_delays_ms": [0.5] * 8, "serving_delays_rate": 5.0})

    refit = recalibrate(profile, _verify_run(20.0, 20.0), verify="Verify #3")

    ((rate, delays),) = refit.serving_delays_load
    assert rate == 20.0 and np.allclose(delays, 10.0)  # 20 ms answers of 10 ms batches
    assert refit.calibration is not None and refit.calibration.delays_rate == 20.0
    assert "answers' delays at 20 req/s" in calibration_line(refit)
    at_verify = simulate(refit, ONE, rate=20, process="constant", requests=400)
    assert at_verify.p50_ms == pytest.approx(20.0, rel=0.02)
    at_light = simulate(refit, ONE, rate=5, process="constant", requests=400)
    assert at_light.p50_ms == pytest.approx(10.5, rel=0.02)
    # a later Verify near that rate replaces its set; one far from it adds its own
    again = recalibrate(refit, _verify_run(21.0, 30.0))
    assert [r for r, _ in again.serving_delays_load] == [21.0]
    assert np.allclose(again.serving_delays_load[0][1], 20.0)
    wider = recalibrate(again, _verify_run(40.0, 12.0))
    assert [r for r, _ in wider.serving_delays_load] == [21.0, 40.0]
    # a closed loop has no rate to put them at, and a stored summary no answers
    closed = recalibrate(profile, _verify_run(20.0, 20.0, closed=True))
    assert closed.serving_delays_load == []
    assert recalibrate(profile, _verify_run(20.0, 20.0).batches).serving_delays_load == []


@pytest.mark.timing
def test_the_saturation_probe_times_the_pace_the_runtime_serves_at() -> None:
    """Profiled at 1-1.5 ms a batch, the runner takes 4 ms served: full batches of 2 pass at
    about 500 rows/s where the profile's ceiling says 1,250. The probe's point holds the
    profile's ceiling to that pace; a runner as fast as profiled leaves none, and so does a
    profile whose ceiling lies at a smaller batch than the full ones. How far below 500 the pace
    falls is the machine's (a loaded one's sleeps overrun), so only the bound is asserted; the
    runner that keeps its profile's pace is profiled at twice its sleep, which no overrun of
    less than 4 ms a batch brings it below."""
    profiled = LatencyProfile(
        batch_sizes=[1, 2], mean_ms=[1.0, 1.5], handoff_ms=0.1, serving_delays_ms=[0.1],
        serving_delays_rate=250.0,
    )  # fmt: skip

    # None also when too few steady batches ran (a neighbour can stall the sender that long on
    # an overloaded machine); the pace is what is checked, so a short run is tried again
    point = next(
        filter(None, (measure_saturation(SLOW_PROBE, profiled, seed=s) for s in (9, 10, 11))),
        None,
    )

    assert point is not None
    pace, extra = point
    assert 0 < pace < 510  # sleep(4 ms) never takes less than 4 ms: 500 rows/s at most
    assert extra == pytest.approx(2000 / pace - 1.5 - 0.1, abs=0.01)
    saturated = profiled.with_saturation(point)
    if pace > 250.0:  # faster than the light probe's rate: the point joins, the light one first
        assert saturated.served_extra_load == [(250.0, 0.0), point]
        assert saturated.ceiling(2, with_handoff=True)[0] == pytest.approx(pace, rel=0.02)
    else:  # a loaded machine's sleeps overran below the light rate: nothing to correct there
        assert saturated == profiled
    # slower per row at batch 2 than at 1: the ceiling is at batch 1, which the full batches
    # of 2 do not time, so no point
    per_row = profiled.model_copy(update={"mean_ms": [1.0, 3.0]})
    assert measure_saturation(SLOW_PROBE, per_row) is None
    slow = profiled.scaled(8.0)  # 8-12 ms a batch profiled: the runtime keeps that pace
    assert measure_saturation(SLOW_PROBE, slow) is None


@pytest.mark.timing
def test_two_instances_saturate_behind_one_pipeline_at_their_own_pace() -> None:
    """Two runners of 4 ms a call behind one Pipeline, profiled at 1-1.5 ms a batch alone and
    as one of two: sent 1.3x one instance's ceiling (1,625 rows/s; not 1.3x the 2,500 two would
    give), their queue grows, and the pace is theirs together: full batches of 2 on each, at
    most 1,000 rows/s; the extra is each one's per call against the profile at two."""
    row = InstanceLatency(instances=2, threads=1, slowdown=[1.0, 1.0], mean_ms=[1.0, 1.5], runs=10)
    profiled = LatencyProfile(
        batch_sizes=[1, 2], mean_ms=[1.0, 1.5], handoff_ms=0.1, serving_delays_ms=[0.1],
        serving_delays_rate=250.0, instance_latency=[row],
    )  # fmt: skip
    probe = replace(SLOW_PROBE, instances=[_SlowWhenServed(), _SlowWhenServed()])

    point = next(
        filter(None, (measure_saturation(probe, profiled, seed=s) for s in (9, 10, 11))), None
    )

    assert point is not None
    pace, extra = point
    assert 0 < pace < 1010
    assert extra == pytest.approx(4000 / pace - 1.5 - 0.1, abs=0.01)
    served = row.model_copy(update={"saturation": point})
    two = profiled.model_copy(update={"instance_latency": [served]})
    if pace > 250.0:  # past the light rate: the two are predicted at that pace
        assert two.ceiling(2, with_handoff=True, instances=2)[0] == pytest.approx(pace, rel=0.02)


def test_a_heavy_point_past_the_saturation_pace_gives_way() -> None:
    profile = TEN_MS.model_copy(
        update={
            "serving_delays_ms": [0.5], "serving_delays_rate": 20.0,
            "served_extra_load": [(20.0, 0.5), (95.0, 1.0)],
        }
    )  # fmt: skip
    assert profile.with_saturation((80.0, 2.5)).served_extra_load == [(20.0, 0.5), (80.0, 2.5)]
    assert profile.with_saturation((99.0, 0.8)) == profile  # no dearer than the last point
    assert profile.with_saturation(None) == profile
