"""The prediction as a band: it covers a synthetic runner's known p99, and the realised rate.

The synthetic runner serves a batch of b rows in BASE_MS[b] x m milliseconds, m drawn afresh
for each batch: 95 % of the time uniform on [0.9, 1.1], 5 % on [1.5, 3] (a tail). Its quantile
function is piecewise linear with the break at the 95th percentile, so a profile holding it at
percentiles 0, 1, ..., 100 draws exactly from it: that profile is the runner itself, and its
p99 over a long simulated run is the runner's known p99. Each trial profiles the runner as
`measure_profile` would (rounds of one run per size, in random order) and bands the prediction
from that finite sample.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.results import realised_rate, summarize
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.simulate import BAND_DRAWS, resampled, simulate, simulate_band

BASE_MS = {1: 10.0, 2: 14.0, 4: 22.0, 8: 38.0}
PERCENTS = np.linspace(0, 100, 101)
SETTINGS = BatchingSettings(max_batch_size=8, timeout_ms=20)
TRIALS = 20


def multiplier(percent: np.ndarray) -> np.ndarray:
    """The runner's slowdown at a percentile: its quantile function."""
    share = np.asarray(percent) / 100
    return np.where(share <= 0.95, 0.9 + 0.2 * share / 0.95, 1.5 + 1.5 * (share - 0.95) / 0.05)


def runner() -> LatencyProfile:
    """The synthetic runner as a profile that draws exactly from it (module docstring)."""
    mean = float(multiplier(np.linspace(0, 100, 100_001)).mean())
    return LatencyProfile(
        batch_sizes=list(BASE_MS),
        mean_ms=[ms * mean for ms in BASE_MS.values()],
        quantiles_ms=[(ms * multiplier(PERCENTS)).tolist() for ms in BASE_MS.values()],
    )


def profiled(rng: np.random.Generator, rounds: int = 40) -> LatencyProfile:
    """What profiling the runner measures: `rounds` of one run per size, interleaved."""
    sizes = list(BASE_MS)
    runs = [
        (sizes[i], float(BASE_MS[sizes[i]] * multiplier(rng.uniform(0, 100))))
        for _ in range(rounds)
        for i in rng.permutation(len(sizes))
    ]
    rows = [[ms for size, ms in runs if size == wanted] for wanted in sizes]
    return LatencyProfile(
        batch_sizes=sizes,
        mean_ms=[float(np.mean(row)) for row in rows],
        quantiles_ms=[np.percentile(row, PERCENTS).tolist() for row in rows],
        runs=runs,
    )


@cache
def known_p99(rate: float) -> float:
    """The runner's p99 at `rate` over a long run (its own, not a profile's)."""
    return simulate(runner(), SETTINGS, rate=rate, requests=100_000, seed=7).p99_ms


@pytest.mark.parametrize("rate", [30.0, 100.0], ids=["light-load", "near-the-knee"])
def test_the_band_covers_the_runners_known_p99_over_seeded_trials(rate: float) -> None:
    known = known_p99(rate)

    bands = [
        simulate_band(profiled(np.random.default_rng(100 + trial)), SETTINGS, rate=rate, seed=trial)
        for trial in range(TRIALS)
    ]

    covered = sum(band.holds_p99(known) for band in bands)
    assert covered >= 0.75 * TRIALS  # a 90 % band, from 20 draws per trial
    widths = [band.p99_width(known) for band in bands]
    assert 0.02 < float(np.median(widths)) < 0.35  # a band, not a point, and not everything


def test_a_point_prediction_from_the_same_profiles_misses_more_often() -> None:
    rate = 100.0
    known = known_p99(rate)

    points = [
        simulate(
            profiled(np.random.default_rng(100 + trial)),
            SETTINGS,
            rate=rate,
            requests=5000,
            seed=trial,
        )  # fmt: skip
        for trial in range(TRIALS)
    ]

    near = sum(abs(point.p99_ms / known - 1) <= 0.02 for point in points)
    assert near < 0.75 * TRIALS  # why a band: a point is seldom this close


def test_the_band_lies_around_the_point_and_is_ordered() -> None:
    profile = profiled(np.random.default_rng(1))

    band = simulate_band(profile, SETTINGS, rate=50, seconds=10)
    point = simulate(profile, SETTINGS, rate=50, requests=5000)

    assert band.p50_low_ms <= band.p50_high_ms and band.p99_low_ms <= band.p99_high_ms
    assert band.p99_low_ms <= point.p99_ms * 1.1 and point.p99_ms <= band.p99_high_ms * 1.1
    assert band.throughput_low <= 50 <= band.throughput_high
    assert band.requests == 500 and band.draws == BAND_DRAWS and band.seconds == 10


def test_a_verify_of_few_requests_is_banded_at_its_own_length() -> None:
    # 8 req/s for 8 s: 64 requests, whose p99 is little more than the slowest answer; a band
    # drawn at 200 requests a draw (what a 25-s run sends) varies less than such a run
    truth = runner()
    runs = [simulate(truth, SETTINGS, rate=8, requests=64, seed=1000 + i).p99_ms for i in range(60)]

    own = simulate_band(truth, SETTINGS, rate=8, seconds=8)
    longer = simulate_band(truth, SETTINGS, rate=8, seconds=25)

    assert own.requests == 64 and longer.requests == 200
    assert sum(own.holds_p99(p99) for p99 in runs) >= 0.85 * len(runs)
    assert sum(longer.holds_p99(p99) for p99 in runs) < sum(own.holds_p99(p99) for p99 in runs)


def test_a_longer_verify_gets_a_narrower_band() -> None:
    profile = profiled(np.random.default_rng(2))

    short = simulate_band(profile, SETTINGS, rate=50, seconds=4)
    long = simulate_band(profile, SETTINGS, rate=50, seconds=20)

    assert short.p99_high_ms - short.p99_low_ms > long.p99_high_ms - long.p99_low_ms


def test_resampling_keeps_runs_in_blocks_and_refits_the_means() -> None:
    runs = [(1, float(ms)) for ms in range(1, 65)]  # every run distinct, in order
    profile = LatencyProfile(batch_sizes=[1], mean_ms=[32.5], runs=runs)

    drawn = resampled(profile, np.random.default_rng(3))

    assert len(drawn.runs) == len(runs)
    steps = [b - a for (_, a), (_, b) in zip(drawn.runs, drawn.runs[1:], strict=False)]
    assert sum(step == 1 for step in steps) >= 60 - 4  # only block edges break the order
    assert drawn.mean_ms[0] == pytest.approx(np.mean([ms for _, ms in drawn.runs]))
    assert drawn.mean_ms[0] != profile.mean_ms[0]


def test_a_paced_draw_is_the_draw_with_every_model_time_scaled() -> None:
    runs = [(size, float(ms)) for ms in range(1, 33) for size in (1, 4)]
    profile = LatencyProfile(
        batch_sizes=[1, 4, 8], mean_ms=[16.5, 16.5, 40.0], p50_ms=[16, 16, 40],
        p99_ms=[32, 32, 60], runs=runs,
    )  # fmt: skip

    paced = resampled(profile, np.random.default_rng(5), pace=1.5)
    scaled = resampled(profile, np.random.default_rng(5)).scaled(1.5)

    for name in ("mean_ms", "p50_ms", "p99_ms"):  # size 8, never drawn, is scaled too
        assert getattr(paced, name) == pytest.approx(getattr(scaled, name))
    assert [s for s, _ in paced.runs] == [s for s, _ in scaled.runs]
    assert [ms for _, ms in paced.runs] == pytest.approx([ms for _, ms in scaled.runs])
    bare = LatencyProfile(batch_sizes=[1], mean_ms=[2.0])
    assert resampled(bare, np.random.default_rng(0), pace=1.5).mean_ms == [3.0]


def test_a_profile_without_runs_is_banded_by_the_run_length_alone() -> None:
    profile = LatencyProfile(batch_sizes=[1, 8], mean_ms=[1.0, 3.0])

    assert resampled(profile, np.random.default_rng(0)) is profile
    band = simulate_band(profile, SETTINGS, rate=500, seconds=2)
    assert band.p99_low_ms < band.p99_high_ms  # Poisson bursts differ from run to run


def test_the_realised_rate_of_a_long_poisson_sequence_is_the_offered_one() -> None:
    rate = 200.0
    gaps = np.random.default_rng(4).exponential(1 / rate, 40_000)
    sent = np.cumsum(gaps)

    assert realised_rate(sent) == pytest.approx(rate, rel=0.02)
    result = summarize(sent, sent, sent + 0.001, [1] * len(sent), rate=rate)
    assert result.offered_rate == rate and result.realised_rate == pytest.approx(rate, rel=0.02)
    assert simulate(runner(), SETTINGS, rate=20, requests=20_000).realised_rate == pytest.approx(
        20, rel=0.03
    )


def test_a_sparser_sequence_reports_its_own_rate_not_the_offer() -> None:
    sent = np.arange(1000) / 80.0  # the generator kept up with only 80 of 100 req/s

    result = summarize(sent, sent, sent + 0.001, [1] * len(sent), rate=100.0)

    assert result.realised_rate == pytest.approx(80.0) and result.offered_rate == 100.0
    assert realised_rate([1.0]) is None and realised_rate([2.0, 2.0]) is None


def test_a_band_on_given_arrivals_replays_them_in_every_draw() -> None:
    profile = profiled(np.random.default_rng(3))
    gaps = np.random.default_rng(5).exponential(1 / 50, 400)
    sent = (np.cumsum(gaps) - gaps[0]).tolist()

    band = simulate_band(profile, SETTINGS, rate=50, arrivals=sent)
    again = simulate_band(profile, SETTINGS, rate=50, arrivals=sent)
    point = simulate(profile, SETTINGS, rate=50, arrivals=sent)

    assert band == again and band.requests == 400
    assert band.p99_low_ms <= band.p99_high_ms
    assert band.p99_low_ms * 0.9 <= point.p99_ms <= band.p99_high_ms * 1.1
    assert band.throughput_low == pytest.approx(band.throughput_high, rel=0.02)  # same sends


def test_a_long_runs_arrivals_are_banded_in_windows_of_the_request_cap() -> None:
    profile = profiled(np.random.default_rng(4))
    gaps = np.random.default_rng(6).exponential(1 / 50, 5000)
    sent = (np.cumsum(gaps) - gaps[0]).tolist()

    band = simulate_band(profile, SETTINGS, rate=50, arrivals=sent, max_requests=4000, draws=10)

    assert band.requests == 400 and band.p99_low_ms < band.p99_high_ms


FAST = LatencyProfile(batch_sizes=[1, 8], mean_ms=[0.5, 1.0])
"""1 ms a batch of up to 8 rows: 8,000 req/s at most."""
PAST_CEILING = (8_800.0, 10.0)
"""10 % past FAST's ceiling for a 10-s Verify: 88,000 requests, far more than a band's draw."""


def test_a_band_past_the_ceiling_holds_the_queue_a_whole_verify_grows() -> None:
    # each draw stops far short of the run's requests and its queue's growth is carried over
    fast, (rate, seconds) = FAST, PAST_CEILING
    settings = BatchingSettings(max_batch_size=8, timeout_ms=0, max_queue=1_000_000)

    band = simulate_band(fast, settings, rate=rate, seconds=seconds)
    whole = simulate(fast, settings, rate=rate, requests=int(rate * seconds))
    short = simulate(fast, settings, rate=rate, requests=band.requests)

    assert band.requests < rate * seconds / 10 and short.saturated
    assert whole.p99_ms > 20 * short.p99_ms  # what a short draw alone would have held
    assert band.p99_low_ms <= whole.p99_ms <= band.p99_high_ms
    assert band.p99_ms == pytest.approx(whole.p99_ms, rel=0.2)
    assert band.p50_ms == pytest.approx(whole.p50_ms, rel=0.2)
    assert band.saturated_share == 1.0  # every draw's queue grew: the band says so


def test_a_band_counts_the_draws_a_slower_pace_tips_past_the_ceiling() -> None:
    # 7,000 req/s against FAST's 8,000: a draw at pace 1.0 or faster keeps up, one at 1.3x
    # (6,150 req/s at most) cannot; at half the ceiling even 1.3x keeps up
    settings = BatchingSettings(max_batch_size=8, timeout_ms=0, max_queue=1_000_000)
    paced = FAST.model_copy(update={"probe_speeds": [1.3]})  # paces 1.0, 1.3 and 1/1.3

    near = simulate_band(paced, settings, rate=7_000, seconds=10)
    half = simulate_band(paced, settings, rate=4_000, seconds=10)

    assert 0 < near.saturated_share < 1  # the slow draws only
    assert near.p99_high_ms > 10 * near.p99_low_ms
    assert half.saturated_share == 0.0


def test_a_full_queue_bounds_the_growth_a_band_carries_over() -> None:
    fast, (rate, seconds) = FAST, PAST_CEILING
    capped = BatchingSettings(max_batch_size=8, timeout_ms=0, max_queue=400)

    band = simulate_band(fast, capped, rate=rate, seconds=seconds)
    whole = simulate(fast, capped, rate=rate, requests=int(rate * seconds))

    # 400 waiting requests at 8,000 req/s: 50 ms of queue at most, however long the run
    assert whole.rejected and band.p99_high_ms < 1000 * 400 / 8000 * 1.1 + 1
    assert band.p99_ms == pytest.approx(whole.p99_ms, rel=0.05)
