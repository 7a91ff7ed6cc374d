"""The Batching page's what-if without Streamlit: the sliders' ranges, the predictions with
their bands and notes, the headline inside its band, the instances."""

from __future__ import annotations

import re

import numpy as np
import pytest

from optistudio.core.batching.instances import InstanceLatency
from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.simulate import simulate, simulate_band, simulate_speed_moves
from optistudio.core.batching.tuner import capacity
from optistudio.core.model.intake import inspect_model
from optistudio.studio import batching_figures as figures
from optistudio.studio import batching_whatif as whatif

SLOW = LatencyProfile(
    batch_sizes=[1, 2, 4],
    mean_ms=[20.0, 36.0, 70.0],
    runs=[
        (b, ms * (1 + 0.2 * (i % 5 == 0)))
        for i, (b, ms) in enumerate([(1, 20.0), (2, 36.0), (4, 70.0)] * 40)
    ],
    instance_latency=[
        InstanceLatency(
            instances=2, threads=1, slowdown=[1.6, 1.7, 1.8], mean_ms=[32, 61, 126], runs=60
        )
    ],
)
"""A CNN of about 57 req/s at batch 4 alone; two instances on shared cores serve a little more."""


PROFILE = LatencyProfile(batch_sizes=[1, 2, 4, 8], mean_ms=[2.0, 2.5, 3.5, 6.0])


def test_the_rate_slider_stops_near_one_and_a_half_ceilings() -> None:
    low, high, step = whatif.rate_bounds(SLOW, 4)
    best = max(SLOW.ceiling(4, with_handoff=True, instances=n)[0] for n in (1, 2))

    assert best * 1.5 <= high < best * 1.5 + 2 * step
    assert low == step and 100 <= high / step <= 400  # a few hundred stops, not 60000
    assert high < SLOW.ceiling(4)[0] * 8  # not eight independent copies' ceiling


@pytest.mark.parametrize(("span", "step"), [(75, 0.5), (1500, 10), (3, 0.02), (0.5, 0.01)], ids=str)
def test_steps_are_one_two_five(span: float, step: float) -> None:
    assert whatif.nice_step(span) == pytest.approx(step)


def test_a_kept_rate_survives_a_range_that_moved() -> None:
    bounds = whatif.rate_bounds(SLOW, 4)

    assert whatif.kept_rate(42.0, bounds, 10.0) == pytest.approx(42.0)
    assert whatif.kept_rate(10_000.0, bounds, 10.0) == bounds[1]  # pulled in, not reset
    assert whatif.kept_rate(None, bounds, 10.0) == pytest.approx(10.0)


@pytest.mark.parametrize(
    ("instances", "rate"), [(1, 30.0), (1, 52.0), (2, 60.0)], ids=["light", "knee", "two"]
)
def test_the_headline_lies_inside_its_band(instances: int, rate: float) -> None:
    settings = BatchingSettings(max_batch_size=4, timeout_ms=2, instances=instances)
    band = simulate_band(SLOW, settings, rate=rate, seconds=5, draws=8)
    point = simulate(SLOW, settings, rate=rate, requests=2000)

    figures = whatif.headline(band, point)

    assert band.p99_low_ms <= figures["p99_ms"] <= band.p99_high_ms
    assert band.p50_low_ms <= figures["p50_ms"] <= band.p50_high_ms
    assert band.throughput_low <= figures["throughput"] <= band.throughput_high


def test_the_instances_slider_spans_the_measured_counts() -> None:
    one = SLOW.model_copy(update={"instance_latency": []})

    assert whatif.most_instances(SLOW) == 2
    assert whatif.most_instances(one) == 2  # one more, said to be unmeasured
    assert "measured running at once" in whatif.instances_caption(SLOW, 2)
    assert "independent copies" in whatif.instances_caption(one, 2)
    assert whatif.instances_caption(SLOW, 1) == ""


def test_predictions_per_instance_count_follow_the_measured_slowdown() -> None:
    settings = BatchingSettings(max_batch_size=4, timeout_ms=2)

    frame = whatif.by_instances(SLOW, settings, 40.0)

    assert frame["instances"].tolist() == [1, 2] and frame["measured"].all()
    one, two = frame["ceiling"].tolist()
    each = max(
        b / (ms * f) for b, ms, f in zip([1, 2, 4], SLOW.mean_ms, [1.6, 1.7, 1.8], strict=True)
    )
    assert one == pytest.approx(4 / 70.0 * 1000)
    assert two == pytest.approx(2 * each * 1000)  # the slowdown measured, not twice one alone


def test_a_slider_move_changes_the_prediction() -> None:
    small = BatchingSettings(max_batch_size=1, timeout_ms=0)
    large = BatchingSettings(max_batch_size=8, timeout_ms=2)

    before = whatif.predict(PROFILE, small, rate=600)
    after = whatif.predict(PROFILE, large, rate=600)

    assert before.saturated and not after.saturated  # 600 req/s is past 1 / 2 ms
    assert after.p99_ms < before.p99_ms and after.mean_batch_size > 1


def test_a_batch_fixed_at_1_is_batched_through_its_rewrite_and_others_are_explained(
    make_model,
) -> None:
    # At 1 the jobs batch the checked rewrite (optistudio.core.batching.fixed_batch); at 2 the
    # model takes two rows per call and requests cannot stack.
    assert whatif.batching_problem(inspect_model(make_model(batch=1))) is None
    problem = whatif.batching_problem(inspect_model(make_model(batch=2)))
    assert problem is not None and "fixed first dimension of 2" in problem


def test_the_page_says_whether_predictions_carry_the_hand_back_time() -> None:
    measured = PROFILE.model_copy(update={"handoff_ms": 1.5})
    settings = BatchingSettings(max_batch_size=8, timeout_ms=2)

    assert whatif.handoff_line(measured) == (
        "Per-batch hand-back under load: 1.50 ms, included in predictions."
    )
    assert "not measured" in whatif.handoff_line(PROFILE)
    served = measured.model_copy(
        update={"served_extra_ms": 0.25, "serving_delays_ms": [-0.5, 0.25, 0.5, 4.0]}
    )
    assert whatif.handoff_line(served).startswith("Per-batch hand-back under load: 1.50 ms; ")
    assert "took 0.25 ms more than profiled" in whatif.handoff_line(served)
    assert "came 0.38 ms (median" in whatif.handoff_line(served)  # a negative draw counts 0
    loaded = served.model_copy(
        update={"served_extra_load": [(100.0, 0.25), (400.0, 1.0)], "request_ms": 0.2}
    )
    assert "took 0.25 ms more than profiled (1.00 ms at 400 req/s)" in whatif.handoff_line(loaded)
    assert "the serving machinery passes 5000 req/s at most" in whatif.handoff_line(loaded)
    stalls = loaded.model_copy(update={"serving_delays_load": [(400.0, [1.0] * 98 + [30.0] * 2)]})
    assert "after its batch (p99 30.00 ms at 400 req/s)" in whatif.handoff_line(stalls)
    assert capacity(measured, settings) == pytest.approx(8 / 0.0075)  # 8 / (6 + 1.5 ms)
    assert capacity(PROFILE, settings) == pytest.approx(8 / 0.006)
    rate = 0.95 * capacity(PROFILE, settings)  # past what the runtime can serve
    assert whatif.predict(measured, settings, rate=rate).saturated
    assert not whatif.predict(PROFILE, settings, rate=rate).saturated


def test_the_page_warns_when_a_setting_sits_at_its_knee() -> None:
    settings = BatchingSettings(max_batch_size=1, timeout_ms=0)  # M/D/1 of 2 ms
    calm = whatif.predict(PROFILE, settings, rate=150)  # rho 0.3
    knee = whatif.predict(PROFILE, settings, rate=460)  # rho 0.92: 0.97 with 5 % slower

    line, warned = whatif.speed_note(PROFILE, settings, rate=150, p99_ms=calm.p99_ms)
    assert not warned and line.startswith(
        f"Against the p99 of one long simulated run, {calm.p99_ms:.2f} ms: "
    )
    assert_agrees(line, calm.p99_ms)
    line, warned = whatif.speed_note(PROFILE, settings, rate=460, p99_ms=knee.p99_ms)
    assert warned and "sit at their knee" in line
    line, warned = whatif.speed_note(PROFILE, settings, rate=510, p99_ms=knee.p99_ms)
    assert warned and "the queue would keep growing" in line  # rho 1.02 * 1.05


def noisy_profile() -> LatencyProfile:
    """A profile whose runs swing as a real machine's do (lognormal, a few slow outliers)."""
    rng = np.random.default_rng(1)
    sizes, means = [1, 2, 4, 8, 16], [2.0, 2.6, 3.8, 6.0, 11.0]
    runs = [
        (size, ms * float(np.exp(rng.normal(0, 0.15))) * (1.3 if rng.random() < 0.05 else 1))
        for size, ms in zip(sizes, means, strict=True)
        for _ in range(60)
    ]
    by_size = [[ms for s, ms in runs if s == size] for size in sizes]
    return LatencyProfile(
        batch_sizes=sizes,
        mean_ms=[float(np.mean(v)) for v in by_size],
        quantiles_ms=[list(np.percentile(v, np.arange(101))) for v in by_size],
        runs=runs,
        handoff_ms=0.2,
    )


def assert_agrees(line: str, headline_p99: float) -> None:
    """The note names the long run's p99 and every change it gives has the sign of its words:
    up when the model is slower, down when faster."""
    assert f"one long simulated run, {headline_p99:.2f} ms" in line
    slower, faster = line.split("; ", 1)
    for part, sign in ((slower, "+"), (faster, "-")):
        change = re.search(r"p99 ([0-9.]+) ms \(([-+])", part)
        if change:
            assert change.group(2) == sign, line
            assert (float(change.group(1)) > headline_p99) == (sign == "+"), line
        else:
            assert "no change beyond the prediction's own noise" in part, line


def test_a_move_against_the_speed_change_is_called_noise_not_a_signed_change() -> None:
    profile = noisy_profile()
    settings = BatchingSettings(max_batch_size=8, timeout_ms=2)
    rate = capacity(profile, settings) * 0.6
    headline = whatif.predict(profile, settings, rate=rate)
    slower, _ = simulate_speed_moves(
        profile, settings, step=whatif.SPEED_STEP, rate=rate, requests=whatif.SLIDER_REQUESTS
    )
    assert slower.p99_ms < headline.p99_ms  # the case seen on the page: slower, yet a lower p99

    line, warned = whatif.speed_note(profile, settings, rate=rate, p99_ms=headline.p99_ms)

    assert not warned
    assert_agrees(line, headline.p99_ms)
    assert "5% slower than profiled, no change beyond the prediction's own noise" in line


def noisy_runs_profile() -> LatencyProfile:
    """PROFILE with 40 interleaved runs per size that spread +-30 % around its means."""
    rng = np.random.default_rng(5)
    sizes, means = PROFILE.batch_sizes, PROFILE.mean_ms
    runs = [
        (sizes[i], float(means[i] * rng.uniform(0.7, 1.3)))
        for _ in range(40)
        for i in rng.permutation(len(sizes))
    ]
    rows = [[ms for size, ms in runs if size == wanted] for wanted in sizes]
    return PROFILE.model_copy(update={"runs": runs, "mean_ms": [float(np.mean(r)) for r in rows]})


def test_the_prediction_carries_its_band_in_words() -> None:
    profile, settings = noisy_runs_profile(), BatchingSettings(max_batch_size=8, timeout_ms=2)
    predicted = whatif.predict(profile, settings, rate=600)

    band = whatif.predict_band(profile, settings, rate=600, seconds=5)
    line = whatif.band_line(predicted, band)

    assert band.p99_low_ms < band.p99_high_ms and band.seconds == 5
    assert f"p99 {predicted.p99_ms:.3g} ms (band {band.p99_low_ms:.3g}-" in line
    assert f"{band.draws} simulated 5-s Verify runs" in line and "throughput" in line


def test_the_rate_sweep_shows_error_bars() -> None:
    frame = whatif.rate_sweep(noisy_runs_profile(), BatchingSettings(max_batch_size=8))

    served = frame[frame["p99_ms"].notna()]  # past the ceiling no latency (overloaded)
    assert len(served) == whatif.SWEEP_POINTS - 1
    assert (served["p99_low_ms"] <= served["p99_high_ms"]).all()
    p99 = next(t for t in figures.sweep_figure(frame, 300).data if t.name == "p99 (ms)")
    assert p99.error_y.array is not None and len(p99.error_y.array) == whatif.SWEEP_POINTS
    assert max(p99.error_y.array) > 0


def test_a_band_that_holds_the_served_probes_error_says_so() -> None:
    from optistudio.core.batching.latency import ServedCheck

    check = ServedCheck(
        rate=300, timeout_ms=2, max_batch_size=8, requests=500, measured_p99_ms=6.0,
        simulated_p99_ms=4.0,
    )  # fmt: skip
    profile = noisy_runs_profile().model_copy(update={"served_checks": [check]})
    settings = BatchingSettings(max_batch_size=8, timeout_ms=2)
    predicted = whatif.predict(profile, settings, rate=600)

    line = whatif.band_line(predicted, whatif.predict_band(profile, settings, rate=600, seconds=5))
    untimed = whatif.predict_band(
        profile, BatchingSettings(max_batch_size=8, timeout_ms=0), rate=600, seconds=5
    )

    assert "x1.50" in line and "ran slower than the simulator predicted" in line
    assert whatif.served_error_line(untimed) == ""
    faster = check.model_copy(update={"measured_p99_ms": 3.6})
    both = profile.model_copy(update={"served_checks": [check, faster]})
    ranged = whatif.served_error_line(whatif.predict_band(both, settings, rate=600, seconds=5))
    assert "x0.90-1.50" in ranged and "ran slower and faster than" in ranged


def test_a_band_drawn_at_the_machines_paces_says_so() -> None:
    settings = BatchingSettings(max_batch_size=8, timeout_ms=2)
    moved = noisy_runs_profile().model_copy(update={"probe_speeds": [0.81, 1.24]})
    still = noisy_runs_profile().model_copy(update={"probe_speeds": [1.0, 1.01]})
    predicted = whatif.predict(moved, settings, rate=600)

    line = whatif.band_line(predicted, whatif.predict_band(moved, settings, rate=600, seconds=5))

    assert "It also holds the model and its serving threads at 0.81-1.24x their" in line
    assert "either way of the profile's own timings" in line
    assert whatif.pace_line(whatif.predict_band(still, settings, rate=600, seconds=5)) == ""
    assert whatif.pace_line(whatif.predict_band(noisy_runs_profile(), settings, rate=600)) == ""


def test_a_band_whose_slow_draws_pass_the_ceiling_says_how_many() -> None:
    settings = BatchingSettings(max_batch_size=8, timeout_ms=0, max_queue=1_000_000)
    paced = LatencyProfile(batch_sizes=[1, 8], mean_ms=[0.5, 1.0], probe_speeds=[1.3])

    near = whatif.predict_band(paced, settings, rate=7_000, seconds=10)
    half = whatif.predict_band(paced, settings, rate=4_000, seconds=10)
    line = whatif.band_line(whatif.predict(paced, settings, rate=7_000), near)

    count = round(near.saturated_share * near.draws)
    assert 0 < count < near.draws
    assert f"In {count} of its {near.draws} draws the queue kept growing" in line
    assert f"the band's top of {whatif.three_digits(near.p99_high_ms)} ms" in line
    assert whatif.saturated_line(half) == ""
