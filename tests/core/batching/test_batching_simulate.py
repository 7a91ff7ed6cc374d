"""The batching simulator against closed forms, and the tuner built on it."""

from __future__ import annotations

import numpy as np
import pytest

from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.latency_profile import default_batch_sizes
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.simulate import simulate, simulate_speed_moves
from optistudio.core.batching.tuner import recommend
from optistudio.core.errors import InvalidSpec

ONE_MS = LatencyProfile(batch_sizes=[1], mean_ms=[1.0])
NO_BATCHING = BatchingSettings(max_batch_size=1, timeout_ms=0)


@pytest.mark.parametrize("rho", [0.3, 0.6, 0.85], ids=lambda r: f"rho={r}")
def test_single_instance_without_batching_is_md1(rho: float) -> None:
    service_ms = 1.0
    result = simulate(ONE_MS, NO_BATCHING, rate=rho / service_ms * 1000, requests=60_000, seed=3)

    wait_ms = rho * service_ms / (2 * (1 - rho))  # Pollaczek-Khinchine for deterministic service
    assert result.mean_queue_ms == pytest.approx(wait_ms, rel=0.08)
    assert result.mean_ms == pytest.approx(service_ms + wait_ms, rel=0.05)
    assert result.throughput == pytest.approx(rho * 1000, rel=0.03)


def test_share_of_requests_that_never_wait_is_one_minus_rho() -> None:
    from optistudio.core.batching.simulate import _Simulation

    rho = 0.5
    sim = _Simulation(ONE_MS, NO_BATCHING, 0.0)
    sim.run(_poisson(rho * 1000, 40_000), 0, 0)
    waited = [start - sent for start, sent in zip(sim.started, sim.sent, strict=True)]
    assert sum(w < 1e-12 for w in waited) / len(waited) == pytest.approx(1 - rho, abs=0.02)


def _poisson(rate: float, count: int):
    from optistudio.core.batching.simulate import _open_arrivals

    return _open_arrivals("poisson", rate, count, 7)


def test_constant_arrivals_fill_batches_by_the_timeout() -> None:
    profile = LatencyProfile(batch_sizes=[1, 4], mean_ms=[0.1, 0.4])
    settings = BatchingSettings(max_batch_size=100, timeout_ms=3.5)

    result = simulate(profile, settings, rate=1000, process="constant", requests=1000)

    assert result.mean_batch_size == pytest.approx(4.0)
    assert result.batch_histogram == {4: 250}
    assert result.p99_ms == pytest.approx(3.5 + 0.4)  # the first of each batch waits it all


def test_eager_threshold_cuts_the_wait() -> None:
    profile = LatencyProfile(batch_sizes=[1, 4], mean_ms=[0.1, 0.4])
    settings = BatchingSettings(max_batch_size=100, timeout_ms=3.5, eager_threshold=2)

    result = simulate(profile, settings, rate=1000, process="constant", requests=1000)

    assert result.batch_histogram == {2: 500}
    assert result.p99_ms == pytest.approx(1.0 + 0.2)


def test_closed_loop_throughput_is_clients_over_cycle() -> None:
    profile = LatencyProfile(batch_sizes=[1, 8], mean_ms=[1.0, 3.0])
    settings = BatchingSettings(max_batch_size=8, timeout_ms=0)

    result = simulate(profile, settings, process="closed", clients=16, requests=8000)

    assert result.mean_batch_size == pytest.approx(8.0)
    assert result.throughput == pytest.approx(8 / 0.003, rel=0.01)


def test_overload_is_flagged_saturated_and_queue_limit_rejects() -> None:
    settings = BatchingSettings(max_batch_size=1, timeout_ms=0, max_queue=50)

    result = simulate(ONE_MS, settings, rate=2000, requests=5000)

    assert result.saturated and result.rejected > 0
    assert result.throughput == pytest.approx(1000, rel=0.03)


def test_profile_interpolates_and_finds_its_ceiling() -> None:
    profile = LatencyProfile(batch_sizes=[1, 8, 16], mean_ms=[1.0, 2.0, 4.0])
    assert profile.latency_ms(4) == pytest.approx(1.0 + 3 / 7)
    assert profile.latency_ms(32) == pytest.approx(8.0)
    assert profile.ceiling(16) == (pytest.approx(4000.0), 8)
    assert default_batch_sizes(12) == [1, 2, 4, 8, 12]


def test_recommendation_meets_the_budget_at_the_rate() -> None:
    profile = LatencyProfile(batch_sizes=[1, 8, 32], mean_ms=[1.0, 3.0, 10.0])

    advice = recommend(profile, p99_budget_ms=20, rate=1500, max_batch_size=32)

    assert advice.feasible and advice.predicted.p99_ms <= 20
    assert advice.settings.max_batch_size > 1  # 1500 req/s is beyond unbatched capacity
    assert "1,500 req/s" in advice.reason


def test_impossible_budget_says_so_with_the_best_p99() -> None:
    advice = recommend(ONE_MS, p99_budget_ms=0.5, rate=100, max_batch_size=4)

    assert not advice.feasible and "No setting" in advice.reason


def test_max_throughput_mode_beats_no_batching() -> None:
    profile = LatencyProfile(batch_sizes=[1, 8], mean_ms=[1.0, 2.0])

    advice = recommend(
        profile, p99_budget_ms=15, max_batch_size=8, requests=800, timeouts_ms=(0.0, 1.0, 5.0)
    )

    assert advice.predicted.throughput > 2 * 1000
    assert advice.predicted.p99_ms <= 15


def test_a_setting_that_fits_the_budget_only_at_the_profiled_speed_is_not_recommended() -> None:
    rate = 800  # rho 0.8 for a 1-ms model; with the model 10 % slower, rho 0.88
    nominal = simulate(ONE_MS, NO_BATCHING, rate=rate, requests=4000)
    budget = nominal.p99_ms * 1.1

    bare = recommend(ONE_MS, p99_budget_ms=budget, rate=rate, max_batch_size=1, margin=0)
    safe = recommend(ONE_MS, p99_budget_ms=budget, rate=rate, max_batch_size=1)

    assert bare.feasible and bare.predicted.p99_ms == pytest.approx(nominal.p99_ms)
    assert not safe.feasible and safe.margin == 0.1
    assert all(c.p99_slower_ms is not None and c.p99_slower_ms > budget for c in safe.candidates)
    assert "only at exactly the profiled speed" in safe.reason


def test_max_throughput_keeps_the_budget_with_the_model_slower() -> None:
    profile = LatencyProfile(batch_sizes=[1, 8], mean_ms=[1.0, 2.0])
    kwargs = {"p99_budget_ms": 15, "max_batch_size": 8, "requests": 800, "timeouts_ms": (0, 5)}

    tight = recommend(profile, margin=0, **kwargs)
    safe = recommend(profile, margin=0.2, **kwargs)

    assert safe.feasible and safe.predicted.throughput < tight.predicted.throughput
    chosen = max(safe.candidates, key=lambda c: c.predicted.throughput if c.feasible else 0)
    assert chosen.p99_slower_ms is not None and chosen.p99_slower_ms <= 15
    assert "20% slower" in safe.reason
    with pytest.raises(InvalidSpec, match="speed margin"):
        recommend(profile, margin=1.5, **kwargs)


def test_bad_rates_are_refused() -> None:
    with pytest.raises(InvalidSpec, match="rate must be positive"):
        simulate(ONE_MS, NO_BATCHING, rate=0)


def test_measured_spread_reaches_the_predicted_tail() -> None:
    flat = [1.0] * 21
    spread = [0.5] * 10 + [1.0] + [1.0] * 8 + [3.0, 6.0]  # a slow tail, as runtimes have
    steady = LatencyProfile(batch_sizes=[1], mean_ms=[1.0], quantiles_ms=[flat])
    jittery = LatencyProfile(batch_sizes=[1], mean_ms=[1.0], quantiles_ms=[spread])

    same = simulate(steady, NO_BATCHING, rate=500, requests=20_000)
    wider = simulate(jittery, NO_BATCHING, rate=500, requests=20_000)
    fixed = simulate(jittery, NO_BATCHING, rate=500, requests=20_000, service="mean")

    assert same.p99_ms == pytest.approx(fixed.p99_ms, rel=0.01)
    assert wider.p99_ms > 1.5 * fixed.p99_ms
    assert wider.throughput == pytest.approx(500, rel=0.03)


def test_quantile_curve_interpolates_between_sizes() -> None:
    profile = LatencyProfile(
        batch_sizes=[1, 3],
        mean_ms=[1.0, 3.0],
        quantiles_ms=[[0.5] * 10 + [1.0] * 11, [3.0] * 21],
    )
    curve = profile.quantile_curve(2)
    assert curve[-1] / curve[0] == pytest.approx(1.0 / 0.75)  # half-way between the shapes
    assert (curve[:-1] + curve[1:]).mean() / 2 == pytest.approx(2.0)  # draws average latency(2)


def test_given_arrival_times_are_replayed() -> None:
    times = [0.0, 0.0001, 0.0002, 0.0003, 0.05]
    settings = BatchingSettings(max_batch_size=8, timeout_ms=1)

    result = simulate(ONE_MS, settings, arrivals=times, warmup_share=0)

    assert result.batch_histogram == {4: 1, 1: 1}


def _steady_then_slow(fast_ms: float, slow_ms: float, count: int) -> LatencyProfile:
    """Size-1 runs: `count` at fast_ms, then `count` at slow_ms (a slow spell), mean between."""
    runs = [(1, fast_ms)] * count + [(1, slow_ms)] * count
    mean = (fast_ms + slow_ms) / 2
    spread = [fast_ms] * 50 + [slow_ms] * 51
    return LatencyProfile(batch_sizes=[1], mean_ms=[mean], quantiles_ms=[spread], runs=runs)


def test_a_slow_spell_in_the_profile_lengthens_the_tail_beyond_independent_draws() -> None:
    profile = _steady_then_slow(1.0, 2.0, 400)  # 0.4 s quick, 0.8 s at half speed, repeating

    spell = simulate(profile, NO_BATCHING, rate=500, requests=20_000)
    scattered = simulate(
        profile.model_copy(update={"runs": []}), NO_BATCHING, rate=500, requests=20_000
    )

    assert spell.p99_ms > 3 * scattered.p99_ms  # the queue builds through the whole spell
    assert spell.throughput == pytest.approx(500, rel=0.03)


def test_a_steady_run_sequence_keeps_the_md1_queue() -> None:
    profile = LatencyProfile(batch_sizes=[1], mean_ms=[1.0], runs=[(1, 1.0)] * 100)
    rho = 0.6

    result = simulate(profile, NO_BATCHING, rate=rho * 1000, requests=60_000, seed=3)

    assert result.mean_queue_ms == pytest.approx(rho / (2 * (1 - rho)), rel=0.08)


def test_a_batch_runs_at_the_speed_of_the_stretch_it_spans() -> None:
    from optistudio.core.batching.simulate import _SpeedTrace

    # runs of 1 ms then 3 ms, each 2 ms of work: twice the mean speed, then two thirds of it
    profile = LatencyProfile(batch_sizes=[1], mean_ms=[2.0], runs=[(1, 1.0), (1, 3.0)])
    speed = _SpeedTrace(profile, np.random.default_rng(0))
    speed.offset = 0.0

    assert speed.duration(0.0, 0.002) == pytest.approx(0.001)
    assert speed.duration(0.0, 0.003) == pytest.approx(0.0025)  # 1 ms fast, then 1.5 ms slow
    assert speed.duration(0.001, 0.004) == pytest.approx(0.004)  # exactly one lap of the runs
    assert speed.duration(0.004, 0.002) == pytest.approx(0.001)  # the second lap starts fast


def test_profile_interleaves_the_sizes_and_keeps_every_run(tiny_model) -> None:
    from optistudio.core.batching.latency_profile import measure_latency_profile

    profile = measure_latency_profile(
        tiny_model, max_batch_size=4, min_runs=5, min_seconds=0, probe_time_scale=0.25
    )

    sizes = [size for size, _ in profile.runs]
    assert len(sizes) == 15
    rounds = [sorted(sizes[i : i + 3]) for i in range(0, 15, 3)]
    assert rounds == [[1, 2, 4]] * 5  # one run per size per round, not in blocks
    assert sizes[:3] != sizes[3:6] or sizes[3:6] != sizes[6:9]  # the order changes by round
    for size, mean in zip(profile.batch_sizes, profile.mean_ms, strict=True):
        assert mean == pytest.approx(np.mean([ms for s, ms in profile.runs if s == size]))


def test_a_slower_model_is_the_md1_queue_at_the_higher_load() -> None:
    rho, step = 0.8, 0.05
    slower, faster = simulate_speed_moves(
        ONE_MS, NO_BATCHING, step=step, rate=rho * 1000, requests=60_000, seed=3
    )

    for result, factor in ((slower, 1 + step), (faster, 1 - step)):
        load = rho * factor  # the same arrivals on a model `factor` times as slow
        wait_ms = load * factor / (2 * (1 - load))
        assert result.mean_queue_ms == pytest.approx(wait_ms, rel=0.08)
    assert slower.p99_ms > 1.2 * simulate(ONE_MS, NO_BATCHING, rate=800, requests=60_000).p99_ms


def test_the_speed_moves_slow_the_serving_costs_with_the_model() -> None:
    profile = ONE_MS.model_copy(update={"handoff_ms": 0.4})
    kwargs = {"rate": 600.0, "requests": 20_000, "seed": 3}

    slower, faster = simulate_speed_moves(profile, NO_BATCHING, step=0.1, **kwargs)

    assert slower == simulate(profile.at_pace(1.1), NO_BATCHING, **kwargs)
    assert faster == simulate(profile.at_pace(0.9), NO_BATCHING, **kwargs)
    assert slower.p99_ms > simulate(profile.scaled(1.1), NO_BATCHING, **kwargs).p99_ms


def test_scaling_a_profile_scales_the_model_not_the_runtime() -> None:
    profile = LatencyProfile(
        batch_sizes=[1, 2], mean_ms=[2.0, 3.0], p50_ms=[2.0, 3.0], p99_ms=[4.0, 5.0],
        quantiles_ms=[[1.0, 4.0], [2.0, 5.0]], runs=[(1, 2.0), (2, 3.0)], handoff_ms=0.5,
    )  # fmt: skip

    slower = profile.scaled(1.5)

    assert slower.mean_ms == [3.0, 4.5] and slower.p99_ms == [6.0, 7.5]
    assert slower.quantiles_ms == [[1.5, 6.0], [3.0, 7.5]] and slower.runs == [(1, 3.0), (2, 4.5)]
    assert slower.handoff_ms == 0.5 and profile.mean_ms == [2.0, 3.0]
    with pytest.raises(ValueError, match="positive"):
        profile.scaled(0)
