"""What serving costs beyond the bare runs (`served_extra_ms`, `serving_delays_ms`): measured by a
light-rate probe through the real Pipeline when a model is profiled, added by the simulator (the
extra to every batch, a delay to every answer without holding the instance), kept out of a
Verify's refit, and absent in profiles stored before they were measured."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from optistudio.core.backends import LoadedModel
from optistudio.core.batching.handoff import SERVING_DELAYS, measure_serving
from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.profile import measure_profile
from optistudio.core.batching.recalibrate import recalibrate
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


class _SlowWhenServed(LoadedModel):
    """A runner whose call takes 4 ms: a profile that says 1 ms leaves 3 ms to serving."""

    details: dict[str, object] = {}

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        time.sleep(0.004)
        return [feeds["x"]]


def test_the_probe_finds_a_runner_slower_served_than_profiled() -> None:
    spec = [TensorSpec(name="x", dtype="float32", shape=["batch", 4])]
    requests = [{"x": np.full((1, 4), i, dtype=np.float32)} for i in range(4)]
    profiled = LatencyProfile(batch_sizes=[1, 2], mean_ms=[1.0, 1.5], handoff_ms=0.1)

    extra, delays = measure_serving(
        _SlowWhenServed(), spec, requests, profile=profiled, max_batch_size=2
    )

    assert extra >= 2.0  # sleep(4 ms) never takes less than 4 ms
    assert 0 < len(delays) <= SERVING_DELAYS
    assert all(np.isfinite(delays))


def test_a_profile_carries_its_serving_costs_and_one_stored_before_them_loads(
    tiny_model: Path,
) -> None:
    profile = measure_profile(tiny_model, max_batch_size=4, min_runs=5, min_seconds=0)

    assert profile.served_extra_ms >= 0
    assert 0 < len(profile.serving_delays_ms) <= SERVING_DELAYS
    assert "steal_share" in profile.environment  # None where the OS has no steal counter
    assert profile.environment["other_cores"] >= 0
    assert LatencyProfile.model_validate_json(profile.model_dump_json()) == profile
    old = json.loads(profile.model_dump_json(exclude={"served_extra_ms", "serving_delays_ms"}))
    stored = LatencyProfile.model_validate(old)
    assert stored.served_extra_ms == 0 and stored.serving_delays_ms == []
