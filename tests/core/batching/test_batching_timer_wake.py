"""Issue 44 item 1: the serving thread wakes late for a batching timeout, the profile measures
how late, and the simulation and its band carry it (a fast model's p99 is the timeout plus a
small batch, so the timer's tail is most of what the band missed)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from optistudio.core.batching import timer_wake
from optistudio.core.batching.latency import QUICK_PROBE_SCALE, LatencyProfile
from optistudio.core.batching.latency_profile import measure_latency_profile
from optistudio.core.batching.results import BatchRecord
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.simulate import resampled, simulate, simulate_band
from optistudio.core.batching.timer_wake import timer_lateness_ms

FAST = LatencyProfile(batch_sizes=[1, 2, 4, 8], mean_ms=[0.1, 0.15, 0.25, 0.45])
"""A 0.1 ms model: its p99 at a light rate is the 2 ms timeout and a small batch."""
SETTINGS = BatchingSettings(max_batch_size=8, timeout_ms=2)


def test_only_batches_the_timer_cut_on_an_idle_instance_count() -> None:
    batches = [
        BatchRecord(0, 1, 1, oldest=0.000, cut=0.0023, run_start=0.0023, run_end=0.0030),
        BatchRecord(0, 8, 8, oldest=0.004, cut=0.0045, run_start=0.0045, run_end=0.0060),  # full
        BatchRecord(0, 2, 2, oldest=0.005, cut=0.0070, run_start=0.0070, run_end=0.0080),  # busy
        BatchRecord(0, 3, 3, oldest=0.010, cut=0.0135, run_start=0.0135, run_end=0.0140),
    ]

    late = timer_lateness_ms(batches, 0.002, 8)

    assert late == pytest.approx([0.3, 1.5])


def test_a_constant_lateness_delays_every_timed_batch_by_it() -> None:
    late = FAST.model_copy(update={"timer_late_ms": [0.7, 0.7]})
    on_time = simulate(FAST, SETTINGS, rate=50, process="constant", requests=400)
    woken_late = simulate(late, SETTINGS, rate=50, process="constant", requests=400)

    assert on_time.p50_ms == pytest.approx(2.0 + 0.1)  # one row a batch, cut at its deadline
    assert woken_late.p50_ms == pytest.approx(2.0 + 0.7 + 0.1)
    assert woken_late.batch_histogram == on_time.batch_histogram


def test_a_timeout_of_zero_waits_on_no_timer() -> None:
    late = FAST.model_copy(update={"timer_late_ms": [5.0]})
    settings = BatchingSettings(max_batch_size=8, timeout_ms=0)

    result = simulate(late, settings, rate=50, process="constant", requests=400)

    assert result.p99_ms == pytest.approx(0.1)


def test_one_deadline_draws_one_lateness_however_many_requests_join_before_it() -> None:
    """Drawn once per deadline, and the thread sleeps it out: a draw per joining request would
    keep the least of them, and a request joining after the deadline would end the sleep."""
    late = FAST.model_copy(update={"timer_late_ms": [0.0, 1.0]})

    result = simulate(late, SETTINGS, rate=1900, process="constant", requests=4000, seed=1)

    # a row joins every 0.53 ms: 4 within a 2 ms timeout, 6 within 3 ms (woken 1 ms late)
    sizes, total = result.batch_histogram, sum(result.batch_histogram.values())
    assert sizes.get(4, 0) + sizes.get(6, 0) >= total - 1  # the run's last batch takes the rest
    assert 0.3 < sizes.get(6, 0) / total < 0.7


def _tailed(count: int, rng: np.random.Generator) -> list[float]:
    """A timer's lateness with a tail: 90 % near 0.1 ms, 10 % 1-5 ms."""
    slow = rng.random(count) < 0.1
    return np.where(slow, rng.uniform(1.0, 5.0, count), rng.uniform(0.05, 0.2, count)).tolist()


def test_the_band_holds_runs_of_a_late_timer_that_a_band_without_it_misses() -> None:
    """The 'measured' runs are the simulator's own with the timer's true lateness (a long
    sample); the band comes from a profile holding a finite sample of it, as a probe takes."""
    truth = FAST.model_copy(update={"timer_late_ms": _tailed(20_000, np.random.default_rng(1))})
    probed = FAST.model_copy(update={"timer_late_ms": _tailed(300, np.random.default_rng(2))})
    rate, seconds = 800.0, 8.0

    measured = [
        simulate(truth, SETTINGS, rate=rate, requests=int(rate * seconds), seed=50 + k).p99_ms
        for k in range(10)
    ]
    band = simulate_band(probed, SETTINGS, rate=rate, seconds=seconds)
    blind = simulate_band(FAST, SETTINGS, rate=rate, seconds=seconds)

    assert sum(band.holds_p99(ms) for ms in measured) >= 9
    assert sum(blind.holds_p99(ms) for ms in measured) == 0


def test_the_band_resamples_the_timers_lateness() -> None:
    profile = FAST.model_copy(
        update={"timer_late_ms": [0.1, 0.2, 3.0], "runs": [(1, 0.1), (2, 0.15)] * 8}
    )

    drawn = [resampled(profile, np.random.default_rng(seed)).timer_late_ms for seed in range(20)]

    assert all(len(late) == 3 and set(late) <= {0.1, 0.2, 3.0} for late in drawn)
    assert len({tuple(late) for late in drawn}) > 1


@pytest.mark.parametrize("late", [[0.1], [0.1, 0.2, 3.0]], ids=["steady", "tailed"])
def test_the_predicted_p50_and_p99_still_grow_with_the_rate(late: list[float]) -> None:
    profile = LatencyProfile(
        batch_sizes=[1, 2, 4, 8], mean_ms=[10.0, 14.0, 22.0, 38.0], timer_late_ms=late
    )
    top = profile.ceiling(8, with_handoff=True)[0]

    results = [
        simulate(profile, SETTINGS, rate=top * share, requests=4000, service="mean")
        for share in np.linspace(0.1, 0.9, 9)
    ]

    for values in ([r.p50_ms for r in results], [r.p99_ms for r in results]):
        assert all(b >= a - 1e-6 for a, b in zip(values, values[1:], strict=False))


def test_negative_lateness_is_refused() -> None:
    with pytest.raises(ValueError, match="timer lateness"):
        LatencyProfile(batch_sizes=[1], mean_ms=[1.0], timer_late_ms=[-0.1])


def test_the_profile_measures_the_timers_lateness(tiny_model: Path) -> None:
    profile = measure_latency_profile(
        tiny_model,
        max_batch_size=4,
        min_seconds=0.05,
        instances=[1],
        probe_time_scale=QUICK_PROBE_SCALE,
    )

    assert profile.timer_late_ms
    assert min(profile.timer_late_ms) >= 0
    assert profile.timed_rate and profile.timed_extra_ms is not None and profile.timed_delays_ms
    assert profile.timed_batch is not None and profile.timed_batch >= 1
    for rate, extra, _, batch in profile.timed_load:
        assert rate > profile.timed_rate and extra >= 0 and 1 <= batch <= 4
    assert profile.timed_calls and all(1 <= rows <= 4 for rows, _ in profile.timed_calls)
    light = simulate(profile, SETTINGS.model_copy(update={"max_batch_size": 4}), rate=5)
    assert light.p50_ms >= 2.0 + min(profile.timer_late_ms)  # a lone request waits it all


def test_a_profile_at_max_batch_one_waits_on_no_timer(tiny_model: Path) -> None:
    profile = measure_latency_profile(
        tiny_model,
        max_batch_size=1,
        min_seconds=0.02,
        instances=[1],
        probe_time_scale=QUICK_PROBE_SCALE,
    )

    assert profile.timer_late_ms == [] and profile.timed_rate is None


TIMED = FAST.model_copy(
    update={
        "served_extra_ms": 0.05,
        "serving_delays_ms": [0.01] * 4,
        "serving_delays_rate": 500.0,
        "timed_rate": 300.0,
        "timed_extra_ms": 1.0,
        "timed_delays_ms": [0.5] * 4,
    }
)
"""Batches that wait on a timer cost the runner 1 ms more per call, and each answer 0.5 ms."""


def test_a_setting_with_a_timeout_takes_the_timer_probes_costs() -> None:
    untimed = BatchingSettings(max_batch_size=8, timeout_ms=0)
    plain = TIMED.model_copy(update={"timed_rate": None, "timed_extra_ms": None})
    plain = plain.model_copy(update={"timed_delays_ms": []})

    with_timer = simulate(TIMED, SETTINGS, rate=50, requests=2000, service="mean")
    before = simulate(plain, SETTINGS, rate=50, requests=2000, service="mean")
    at_zero = simulate(TIMED, untimed, rate=50, requests=2000, service="mean")
    at_zero_before = simulate(plain, untimed, rate=50, requests=2000, service="mean")

    # each request: its batch's runner call 1 - 0.05 ms longer, its answer 0.5 - 0.01 ms later
    assert with_timer.p50_ms - before.p50_ms == pytest.approx(0.95 + 0.49, abs=0.05)
    assert at_zero.p50_ms == pytest.approx(at_zero_before.p50_ms)


def test_the_timer_probes_point_leads_the_heavier_ones() -> None:
    loaded = TIMED.model_copy(
        update={
            "served_extra_load": [(500.0, 0.05), (4000.0, 2.0)],
            "serving_delays_load": [(4000.0, [3.0] * 4)],
        }
    )

    assert loaded.served_extra_at(None, timed=True) == 1.0
    assert loaded.served_extra_at(300.0, timed=True) == pytest.approx(1.0)
    assert loaded.served_extra_at(2150.0, timed=True) == pytest.approx(1.5)  # halfway to 2.0
    assert loaded.served_extra_at(300.0) == pytest.approx(0.05)  # timeout 0: the light probe's
    assert loaded.serving_delays_at(100.0, timed=True) == [0.5] * 4
    assert loaded.serving_delays_at(9000.0, timed=True) == [3.0] * 4
    assert loaded.serving_delays_at(100.0) == [0.01] * 4

    # a heavy point measured with the timeout leads instead of the timeout-0 ones
    timed_heavy = loaded.model_copy(update={"timed_load": [(2300.0, 0.5, [1.0] * 4, 6.0)]})
    assert timed_heavy.served_extra_at(2300.0, timed=True) == pytest.approx(1.0)  # running max
    assert timed_heavy.served_extra_at(9000.0, timed=True) == pytest.approx(2.0)  # then 4000's
    assert timed_heavy.served_extra_at(2300.0) == pytest.approx(0.05 + 1.95 * 1800 / 3500)
    assert timed_heavy.serving_delays_at(2300.0, timed=True) == [1.0] * 4
    assert timed_heavy.serving_delays_at(9000.0, timed=True) == [3.0] * 4
    assert sorted(timed_heavy.serving_delays_at(1300.0, timed=True)) == [0.5, 0.5, 1.0, 1.0]


def test_timed_costs_need_the_timer_probes_rate() -> None:
    with pytest.raises(ValueError, match="timer probe's rate"):
        LatencyProfile(batch_sizes=[1], mean_ms=[1.0], timed_extra_ms=0.2)
    with pytest.raises(ValueError, match="timed_load needs"):
        LatencyProfile.model_validate(
            TIMED.model_dump() | {"timed_load": [(200.0, 0.5, [1.0], 2.0)]}
        )


def test_with_a_timeout_the_runners_extra_follows_the_batch_size() -> None:
    sized = TIMED.model_copy(
        update={
            "timed_batch": 1.5,
            "timed_extra_ms": 0.1,
            "timed_load": [(50_000.0, 0.7, [0.5], 7.5)],  # far above the rate simulated below
        }
    )
    extra = sized.timed_extra_by_size()

    assert extra is not None
    assert extra(1) == pytest.approx(0.1) and extra(8) == pytest.approx(0.7)  # flat beyond
    assert extra(4) == pytest.approx(0.1 + 0.6 * 2.5 / 6)
    assert TIMED.timed_extra_by_size() is None  # no batch size kept with the extra
    # full batches at 8,000 req/s pay the full batches' extra (0.7 ms), where the rate alone
    # (0.19 ms at 8,000 between 300 and 50,000 req/s) would not
    by_rate = sized.model_copy(update={"timed_batch": None})
    full = simulate(sized, SETTINGS, rate=8000, requests=4000, service="mean")
    rated = simulate(by_rate, SETTINGS, rate=8000, requests=4000, service="mean")
    assert full.mean_batch_size > 7
    assert full.mean_compute_ms - rated.mean_compute_ms > 0.4


def test_a_timed_heavy_point_alone_still_takes_the_rate_into_account() -> None:
    """A profile whose only heavier point is the timed one (the timeout-0 heavy probe fell
    behind) still simulates a heavy rate with that point's delays."""
    heavy = TIMED.model_copy(
        update={"timed_batch": 1.0, "timed_load": [(2000.0, 0.0, [3.0] * 4, 2.0)]}
    )
    light = TIMED.model_copy(update={"timed_batch": 1.0})

    with_point = simulate(heavy, SETTINGS, rate=5000, requests=4000, service="mean")
    without = simulate(light, SETTINGS, rate=5000, requests=4000, service="mean")

    assert with_point.p50_ms - without.p50_ms == pytest.approx(2.5, abs=0.3)  # 3.0 - 0.5 ms


SPREAD = TIMED.model_copy(
    update={
        "timed_batch": 1.0,
        "timed_extra_ms": 0.1,
        # calls of one row: 0.1 ms extra mostly, 2 ms in one call of ten
        "timed_calls": [(1, 2.1 if i % 10 == 0 else 0.1) for i in range(60)] + [(2, 0.3)] * 5,
    }
)
"""Served calls of one row whose extra has a tail the median does not show."""


def test_the_timed_calls_spread_is_kept_per_size_around_its_median() -> None:
    spread = SPREAD.timed_extra_spread(8)

    assert set(spread) == set(range(1, 9))
    assert np.median(spread[1]) == pytest.approx(0.0)
    assert spread[1].max() == pytest.approx(2.0)  # the tail kept
    # 5 calls of two rows are too few for a spread of their own: every size without one
    # shares all calls' deviations from their own size's median
    assert len(spread[2]) == len(spread[8]) == 65 and sorted(spread[2]).count(0.0) == 59
    assert SPREAD.timed_extra_spread(0) == {}
    assert TIMED.timed_extra_spread(8) == {}  # no sizes kept with the extra: nothing to centre on
    few = SPREAD.model_copy(update={"timed_calls": SPREAD.timed_calls[:29]})
    assert few.timed_extra_spread(8) == {}  # too few calls for any spread


def test_a_timed_setting_draws_its_calls_tail_and_an_untimed_one_does_not() -> None:
    light = 20.0  # batches of one row, each alone
    no_tail = SPREAD.model_copy(update={"timed_calls": []})
    untimed = SETTINGS.model_copy(update={"timeout_ms": 0})

    drawn = simulate(SPREAD, SETTINGS, rate=light, requests=3000)
    fixed = simulate(no_tail, SETTINGS, rate=light, requests=3000)
    mean = simulate(SPREAD, SETTINGS, rate=light, requests=3000, service="mean")

    assert drawn.p99_ms - fixed.p99_ms > 1.5  # one call in ten pays 2 ms more
    assert drawn.p50_ms == pytest.approx(fixed.p50_ms, abs=0.1)  # the middle stays
    assert mean.p99_ms == pytest.approx(fixed.p99_ms, abs=0.1)  # the mean service draws none
    at_zero = simulate(SPREAD, untimed, rate=light, requests=3000)
    assert at_zero.p99_ms == pytest.approx(
        simulate(no_tail, untimed, rate=light, requests=3000).p99_ms
    )


def test_the_band_resamples_the_timed_calls() -> None:
    drawn = resampled(SPREAD, np.random.default_rng(0))

    assert len(drawn.timed_calls) == len(SPREAD.timed_calls)
    assert set(drawn.timed_calls) <= set(SPREAD.timed_calls)
    assert simulate_band(SPREAD, SETTINGS, rate=20.0, seconds=5, draws=8).p99_high_ms > 2.0


def test_timed_calls_need_the_timer_probes_rate_and_a_row() -> None:
    with pytest.raises(ValueError, match="timer probe's rate"):
        LatencyProfile(batch_sizes=[1], mean_ms=[1.0], timed_calls=[(1, 0.2)])
    with pytest.raises(ValueError, match="at least one row"):
        LatencyProfile.model_validate(SPREAD.model_dump() | {"timed_calls": [(0, 0.2)]})


def test_a_heavier_timed_point_runs_only_well_above_the_one_below(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A model whose ceiling is under 1,000 req/s has its light timer probe at 30 % of it
    already: the 30 % point would measure the same rate again, and is not run."""
    shares: list[float] = []

    def served(probe: object, profile: LatencyProfile, share: float, **_: object) -> tuple:
        shares.append(share)
        run = SimpleNamespace(batches=[], result=None)  # no batch ran: the shares above are left
        return run, 0.0, 1.0

    monkeypatch.setattr(timer_wake, "serve_share", served)
    probe = SimpleNamespace(max_batch_size=8)
    slow = LatencyProfile(batch_sizes=[1, 2, 4, 8], mean_ms=[2.0, 3.0, 5.0, 9.0])  # ~890 req/s
    light = timer_wake.probe_rate_for_timer(slow, 8)

    assert light == pytest.approx(0.3 * slow.ceiling(8, with_handoff=True)[0])
    assert timer_wake.measure_timed_under_load(probe, slow, light) == []  # type: ignore[arg-type]
    assert shares == [0.6]  # 30 % is the light probe's own rate
    shares.clear()
    timer_wake.measure_timed_under_load(probe, FAST, 300.0)  # type: ignore[arg-type]
    assert shares == [0.3]  # a fast model's 30 % is far above 300 req/s (and no batch ran)


def test_a_slow_spell_in_the_profiles_runs_slows_the_timed_calls_within_it() -> None:
    def with_slow_runs(at: set[int]) -> LatencyProfile:
        runs = [(1, 1.0 if i in at else 0.1) for i in range(600)]
        mean = float(np.mean([ms for _, ms in runs]))
        return SPREAD.model_copy(update={"runs": runs, "mean_ms": [mean, 0.15, 0.25, 0.45]})

    spell = with_slow_runs(set(range(300, 312)))  # twelve slow runs in a row
    scattered = with_slow_runs(set(range(0, 600, 50)))  # the same twelve, one in fifty

    in_spell = simulate(spell, SETTINGS, rate=20.0, requests=3000)
    spread_out = simulate(scattered, SETTINGS, rate=20.0, requests=3000)

    # the calls in the spell ran about five times their time: a run-length stretch of slow calls
    # reaches the tail; scattered, each stretch of BLOCK_RUNS runs is only as slow as its mean
    assert in_spell.p99_ms > spread_out.p99_ms + 1.0
    assert in_spell.p50_ms == pytest.approx(spread_out.p50_ms, abs=0.3)
