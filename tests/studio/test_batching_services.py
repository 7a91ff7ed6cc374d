"""The Batching page's logic without Streamlit: predictions, charts and exports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.recalibrate import recalibrate
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.simulate import simulate, simulate_band, simulate_speed_moves
from optistudio.core.batching.specs import BatchingProfileSpec
from optistudio.core.batching.triton import parse_pbtxt
from optistudio.core.batching.tuner import recommend
from optistudio.core.model.intake import inspect_model
from optistudio.services.jobresults import VerifyBatches, VerifyPrediction
from optistudio.studio import batching_services as batching

PROFILE = LatencyProfile(batch_sizes=[1, 2, 4, 8], mean_ms=[2.0, 2.5, 3.5, 6.0])


def test_a_slider_move_changes_the_prediction() -> None:
    small = BatchingSettings(max_batch_size=1, timeout_ms=0)
    large = BatchingSettings(max_batch_size=8, timeout_ms=2)

    before = batching.predict(PROFILE, small, rate=600)
    after = batching.predict(PROFILE, large, rate=600)

    assert before.saturated and not after.saturated  # 600 req/s is past 1 / 2 ms
    assert after.p99_ms < before.p99_ms and after.mean_batch_size > 1


def test_rate_sweep_and_figures_cover_the_range() -> None:
    settings = BatchingSettings(max_batch_size=8, timeout_ms=2)
    frame = batching.rate_sweep(PROFILE, settings)

    assert len(frame) == batching.SWEEP_POINTS
    assert frame["rate"].iloc[-1] > batching.capacity(PROFILE, settings)
    assert len(batching.sweep_figure(frame, 300).data) == 3
    assert len(batching.profile_figure(PROFILE).data) == 2


def test_comparison_frame_holds_relative_errors() -> None:
    predicted = batching.predict(PROFILE, BatchingSettings(), rate=200)
    measured = predicted.model_copy(update={"p99_ms": predicted.p99_ms * 2})

    frame = batching.comparison_frame(predicted, measured).set_index("figure")

    assert frame.loc["p99_ms", "error"] == pytest.approx(0.5)
    assert frame.loc["throughput", "error"] == 0


def test_candidates_figure_marks_the_pick() -> None:
    advice = recommend(PROFILE, p99_budget_ms=20, rate=500, max_batch_size=8)
    figure = batching.candidates_figure(advice)
    assert figure.data[-1].name == "recommended"


def test_candidates_figure_sets_apart_settings_without_headroom() -> None:
    one_ms = LatencyProfile(batch_sizes=[1], mean_ms=[1.0])
    nominal = simulate(
        one_ms, BatchingSettings(max_batch_size=1, timeout_ms=0), rate=800, requests=4000
    )
    advice = recommend(one_ms, p99_budget_ms=nominal.p99_ms * 1.1, rate=800, max_batch_size=1)

    figure = batching.candidates_figure(advice)

    names = [trace.name for trace in figure.data]
    assert names == ["only at the profiled speed (not 10% slower)", "recommended"]
    assert "with the model 10% slower" in figure.data[0].hovertext[0]


def test_the_settings_tried_are_labelled_where_there_is_room() -> None:
    advice = recommend(PROFILE, p99_budget_ms=20, rate=500, max_batch_size=8)

    figure = batching.candidates_figure(advice)

    tried = [trace for trace in figure.data if trace.name != "recommended"]
    points = [
        (text, hover, x, y)
        for trace in tried
        for text, hover, x, y in zip(trace.text, trace.hovertext, trace.x, trace.y, strict=True)
    ]
    assert len(points) == len(advice.candidates) and all("text" in t.mode for t in tried)
    labelled = [(text, x, y) for text, hover, x, y in points if text]
    setting = {
        f"b{c.max_batch_size} · {c.timeout_ms:g} ms": f"max batch {c.max_batch_size}, timeout "
        f"{c.timeout_ms:g} ms"
        for c in advice.candidates
    }
    assert all(hover.startswith(setting[text]) for text, hover, *_ in points if text)
    pick = f"b{advice.settings.max_batch_size} · {advice.settings.timeout_ms:g} ms"
    assert pick in [text for text, *_ in labelled]
    assert 3 <= len(labelled) < len(points)  # at a fixed rate many settings share a spot
    assert len({(round(x, 6), round(y, 3)) for _, x, y in labelled}) == len(labelled)
    assert_plain_log_axis(figure.layout.xaxis)


def assert_plain_log_axis(axis) -> None:  # type: ignore[no-untyped-def]
    """Tick labels that are the tick values written out, ascending ('2, 5, 10, 20', never
    Plotly's mantissa digits '3, 5, 8, 1, 2')."""
    assert axis.type == "log" and len(axis.tickvals) >= 3
    assert [float(text) for text in axis.ticktext] == list(axis.tickvals)
    assert list(axis.tickvals) == sorted(axis.tickvals)


def test_the_rate_sweep_has_a_readable_latency_axis() -> None:
    frame = batching.rate_sweep(PROFILE, BatchingSettings(max_batch_size=8, timeout_ms=2))

    figure = batching.sweep_figure(frame, 300)

    assert_plain_log_axis(figure.layout.yaxis2)  # latency, on the right
    low, high = frame[["p50_ms", "p99_ms"]].min().min(), frame["p99_ms"].max()
    ticks = figure.layout.yaxis2.tickvals
    assert sum(low <= t <= high for t in ticks) >= 3  # ticks where the lines are


def test_the_profile_puts_batch_sizes_on_a_category_axis() -> None:
    axis = batching.profile_figure(PROFILE).layout.xaxis

    assert axis.type == "category" and list(axis.categoryarray) == ["1", "2", "4", "8"]
    assert axis.title.text == "batch size" and axis.automargin


def test_exports_for_our_runtime_and_triton(tiny_model: Path) -> None:
    settings = BatchingSettings(max_batch_size=8, timeout_ms=2.5, instances=2)
    info = inspect_model(tiny_model)

    document = json.loads(batching.pipeline_json("tiny.onnx", "onnxruntime", settings, {}))
    config = parse_pbtxt(batching.triton_text("tiny v2.onnx", info, settings))

    assert BatchingSettings(**document["batching"]) == settings
    assert config["name"] == "tiny_v2"
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 2500
    assert config["instance_group"][0]["count"] == 2


def test_a_batch_fixed_at_1_is_batched_through_its_rewrite_and_others_are_explained(
    make_model,
) -> None:
    # At 1 the jobs batch the checked rewrite (optistudio.core.batching.fixed_batch); at 2 the
    # model takes two rows per call and requests cannot stack.
    assert batching.batching_problem(inspect_model(make_model(batch=1))) is None
    problem = batching.batching_problem(inspect_model(make_model(batch=2)))
    assert problem is not None and "fixed first dimension of 2" in problem


@pytest.mark.parametrize(
    ("runner", "said"),
    [
        ({"1": [50, 4.0], "8": [10, 12.0]}, "2.00x slower"),  # twice the profile's 2 and 6 ms
        ({"1": [50, 1.0], "8": [10, 3.0]}, "2.00x faster"),
        ({"1": [50, 2.1], "8": [10, 6.0]}, None),  # within 10 % of the profile
    ],
    ids=["slower", "faster", "as-profiled"],
)
def test_verify_says_when_the_model_did_not_run_at_the_profiles_speed(
    runner: dict, said: str | None
) -> None:
    stored = {"runner": runner, "handoff_ms": 0.2}  # as a verify job's result holds it
    note = batching.profile_mismatch(PROFILE, VerifyBatches.model_validate(stored))

    assert (note is None) if said is None else (said in note and "not from the batching" in note)


def test_a_verify_job_without_batches_says_nothing() -> None:
    assert batching.profile_mismatch(PROFILE, None) is None


def test_the_page_says_whether_predictions_carry_the_hand_back_time() -> None:
    measured = PROFILE.model_copy(update={"handoff_ms": 1.5})
    settings = BatchingSettings(max_batch_size=8, timeout_ms=2)

    assert batching.handoff_line(measured) == (
        "Per-batch hand-back under load: 1.50 ms, included in predictions."
    )
    assert "not measured" in batching.handoff_line(PROFILE)
    served = measured.model_copy(
        update={"served_extra_ms": 0.25, "serving_delays_ms": [-0.5, 0.25, 0.5, 4.0]}
    )
    assert batching.handoff_line(served).startswith("Per-batch hand-back under load: 1.50 ms; ")
    assert "took 0.25 ms more than profiled" in batching.handoff_line(served)
    assert "came 0.38 ms (median" in batching.handoff_line(served)  # a negative draw counts 0
    loaded = served.model_copy(
        update={"served_extra_load": [(100.0, 0.25), (400.0, 1.0)], "request_ms": 0.2}
    )
    assert "took 0.25 ms more than profiled (1.00 ms at 400 req/s)" in batching.handoff_line(loaded)
    assert "the serving machinery passes 5000 req/s at most" in batching.handoff_line(loaded)
    stalls = loaded.model_copy(update={"serving_delays_load": [(400.0, [1.0] * 98 + [30.0] * 2)]})
    assert "after its batch (p99 30.00 ms at 400 req/s)" in batching.handoff_line(stalls)
    assert batching.capacity(measured, settings) == pytest.approx(8 / 0.0075)  # 8 / (6 + 1.5 ms)
    assert batching.capacity(PROFILE, settings) == pytest.approx(8 / 0.006)
    rate = 0.95 * batching.capacity(PROFILE, settings)  # past what the runtime can serve
    assert batching.predict(measured, settings, rate=rate).saturated
    assert not batching.predict(PROFILE, settings, rate=rate).saturated


@pytest.mark.parametrize(
    ("halves", "warned"), [((40.0, 44.0), False), ((30.0, 60.0), True), (None, None)]
)
def test_the_page_says_how_settled_the_measured_p99_is(halves, warned) -> None:  # type: ignore[no-untyped-def]
    measured = batching.predict(PROFILE, BatchingSettings(), rate=200)
    note = batching.tail_note(measured.model_copy(update={"p99_ms": 42.0}), halves)

    if halves is None:  # too short a run to split, or stored before halves were kept
        assert note is None
        return
    line, warning = note
    assert f"first half {halves[0]:.1f} ms, in its second {halves[1]:.1f} ms" in line
    assert warning is warned and (("verify for longer" in line) is warned)


def test_the_page_warns_when_a_setting_sits_at_its_knee() -> None:
    settings = BatchingSettings(max_batch_size=1, timeout_ms=0)  # M/D/1 of 2 ms
    calm = batching.predict(PROFILE, settings, rate=150)  # rho 0.3
    knee = batching.predict(PROFILE, settings, rate=460)  # rho 0.92: 0.97 with 5 % slower

    line, warned = batching.speed_note(PROFILE, settings, rate=150, p99_ms=calm.p99_ms)
    assert not warned and line.startswith(
        f"Against the p99 of one long simulated run, {calm.p99_ms:.2f} ms: "
    )
    assert_agrees(line, calm.p99_ms)
    line, warned = batching.speed_note(PROFILE, settings, rate=460, p99_ms=knee.p99_ms)
    assert warned and "sit at their knee" in line
    line, warned = batching.speed_note(PROFILE, settings, rate=510, p99_ms=knee.p99_ms)
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
    rate = batching.capacity(profile, settings) * 0.6
    headline = batching.predict(profile, settings, rate=rate)
    slower, _ = simulate_speed_moves(
        profile, settings, step=batching.SPEED_STEP, rate=rate, requests=batching.SLIDER_REQUESTS
    )
    assert slower.p99_ms < headline.p99_ms  # the case seen on the page: slower, yet a lower p99

    line, warned = batching.speed_note(profile, settings, rate=rate, p99_ms=headline.p99_ms)

    assert not warned
    assert_agrees(line, headline.p99_ms)
    assert "5% slower than profiled, no change beyond the prediction's own noise" in line


def test_verify_sends_the_requests_the_profile_timed() -> None:
    served = BatchingProfileSpec(
        backend="openvino",
        threads=1,
        spin_wait=True,
        shapes={"audio": [1, 16000], "state": [2, 1, 128]},
        dims={"frames": 100},
        values={"sr": 16000},
        inputs_file="request.npz",
    )
    settings = BatchingSettings(max_batch_size=4, timeout_ms=1)

    spec = batching.verify_spec(served, settings, rate=50, seconds=2)

    carried = set(BatchingProfileSpec.model_fields) - {"max_batch_size", "min_seconds"}
    assert {name: getattr(spec, name) for name in carried} == served.model_dump(include=carried)
    assert (spec.settings, spec.rate, spec.seconds) == (settings, 50, 2)
    assert batching.request_line(served) == (
        "audio=1,16000; state=2,1,128; frames=100; sr filled with 16000; "
        "the arrays of the profile's .npz"
    )
    assert batching.request_line(BatchingProfileSpec()) == "the model's default inputs"


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
    predicted = batching.predict(profile, settings, rate=600)

    band = batching.predict_band(profile, settings, rate=600, seconds=5)
    line = batching.band_line(predicted, band)

    assert band.p99_low_ms < band.p99_high_ms and band.seconds == 5
    assert f"p99 {predicted.p99_ms:.3g} ms (band {band.p99_low_ms:.3g}-" in line
    assert "20 simulated 5-s Verify runs" in line and "throughput" in line


@pytest.mark.parametrize(
    ("measured_p99", "where", "inside"),
    [(11.0, "inside", True), (20.0, "above", False), (5.0, "below", False)],
    ids=["inside", "above", "below"],
)
def test_a_verify_is_judged_by_whether_its_p99_falls_in_the_band(
    measured_p99: float, where: str, inside: bool
) -> None:
    predicted = batching.predict(PROFILE, BatchingSettings(), rate=200)
    predicted = predicted.model_copy(update={"p99_ms": 10.0})
    band = batching.predict_band(PROFILE, BatchingSettings(), rate=200).model_copy(
        update={"p99_low_ms": 8.0, "p99_high_ms": 12.0}
    )
    measured = predicted.model_copy(update={"p99_ms": measured_p99})

    line, verdict = batching.band_verdict(predicted, band, measured)

    assert verdict is inside
    assert f"lies {where} the predicted band 8-12 ms (±20% of the predicted 10 ms)" in line


def test_the_realised_arrival_rate_is_shown_beside_the_offered_one() -> None:
    measured = batching.predict(PROFILE, BatchingSettings(), rate=200)
    short = measured.model_copy(update={"realised_rate": 170.0})

    line, warned = batching.rate_line(measured)  # type: ignore[misc]
    assert not warned and "of the 200 offered" in line
    line, warned = batching.rate_line(short)  # type: ignore[misc]
    assert warned and "170 req/s of the 200 offered (-15%)" in line
    assert batching.rate_line(measured.model_copy(update={"realised_rate": None})) is None


def test_the_comparison_holds_the_band_and_the_prediction_at_the_realised_rate() -> None:
    settings = BatchingSettings()
    predicted = batching.predict(PROFILE, settings, rate=200)
    band = batching.predict_band(PROFILE, settings, rate=200)
    at_realised = batching.predict(PROFILE, settings, rate=180)
    measured = predicted.model_copy(update={"p99_ms": band.p99_high_ms * 2})

    frame = batching.comparison_frame(predicted, measured, band, at_realised).set_index("figure")

    assert frame.loc["p99_ms", "high"] == band.p99_high_ms and not frame.loc["p99_ms", "inside"]
    assert frame.loc["throughput", "low"] == band.throughput_low
    assert frame.loc["throughput", "predicted at realised rate"] == at_realised.throughput
    bars = batching.comparison_figure(frame.reset_index()).data[0].error_y
    assert bars.array is not None and max(bars.array) > 0  # the band on the predicted bars


def test_the_rate_sweep_shows_error_bars() -> None:
    frame = batching.rate_sweep(noisy_runs_profile(), BatchingSettings(max_batch_size=8))

    assert (frame["p99_low_ms"] <= frame["p99_high_ms"]).all()
    p99 = next(t for t in batching.sweep_figure(frame, 300).data if t.name == "p99 (ms)")
    assert p99.error_y.array is not None and len(p99.error_y.array) == batching.SWEEP_POINTS
    assert max(p99.error_y.array) > 0


def verify_row(
    job: int, p99_ms: float, prediction: VerifyPrediction | None, status: str = "succeeded"
) -> dict:
    """A Verify job as `recent_jobs` gives it: its measured p99 and what it stored of its
    prediction and refit (None: stored before Verify recalibrated)."""
    measured = simulate(PROFILE, SETTINGS, rate=20, requests=500).model_copy(
        update={"p99_ms": p99_ms}
    )
    result = SimpleNamespace(measured=measured, prediction=prediction)
    return {"job": job, "status": status, "result": result}


SETTINGS = BatchingSettings(max_batch_size=8, timeout_ms=0)


def refit(
    job: int, profile: LatencyProfile, slower: float, profile_job: int = 5
) -> VerifyPrediction:
    """What Verify job `job` stores: its prediction from `profile` and `profile` refitted from
    batches `slower` times as slow as it says."""
    runner = {1: (400, profile.latency_ms(1) * slower), 2: (300, profile.latency_ms(2) * slower)}
    calibrated = recalibrate(profile, VerifyBatches(runner=runner), verify=f"Verify #{job}")
    predicted = simulate(profile, SETTINGS, rate=20, requests=2000)
    return VerifyPrediction(
        profile_job=profile_job,
        rests_on="the profile from job #5, as measured",
        predicted=predicted,
        band=simulate_band(profile, SETTINGS, rate=20, seconds=5, draws=4),
        slowdown=slower,
        calibrated=calibrated,
        recalibrated=simulate(calibrated, SETTINGS, rate=20, requests=2000),
    )


def test_the_page_predicts_from_the_newest_profile_a_verify_job_stored() -> None:
    first = refit(7, PROFILE, 1.2)
    second = refit(9, first.calibrated, 1.0)  # ran as the first refit said
    jobs = [
        verify_row(10, 9.0, refit(10, PROFILE, 3.0), status="failed"),
        verify_row(9, 9.0, second),
        verify_row(8, 9.0, None),  # stored before Verify recalibrated
        verify_row(7, 8.0, first),
        verify_row(3, 9.0, refit(3, PROFILE, 3.0, profile_job=2)),  # an older profile's
    ]

    profile, line = batching.profile_in_use(5, PROFILE, jobs)
    before = batching.predict(PROFILE, SETTINGS, rate=20).p50_ms
    after = batching.predict(profile, SETTINGS, rate=20).p50_ms

    assert profile == second.calibrated
    assert profile.calibration is not None and profile.calibration.previous == ["Verify #7"]
    assert after / before == pytest.approx(1.2, abs=0.04)
    assert line.startswith(
        "Predictions rest on the profile from job #5, recalibrated by Verify #9 (after Verify #7)"
    )
    assert "the service time moved at batch 1 +20 %" in line  # both refits together
    assert "moved the predicted p99 from" in line and "(measured 9 ms)" in line
    assert batching.profile_in_use(5, PROFILE, jobs[2:3]) == (
        PROFILE,
        "Predictions rest on the profile from job #5, as measured.",
    )


def test_the_convergence_chart_has_a_point_per_verify_of_the_profile_in_order() -> None:
    first = refit(7, PROFILE, 1.2)
    jobs = [verify_row(9, 9.0, refit(9, first.calibrated, 1.0)), verify_row(7, 8.0, first)]

    frame = batching.convergence_frame(5, jobs)
    figure = batching.convergence_figure(frame)

    assert list(frame["verify"]) == ["#7", "#9"]
    assert list(frame["measured_p99_ms"]) == [8.0, 9.0]
    assert (frame["p99_low_ms"] <= frame["p99_high_ms"]).all()
    predicted, measured = figure.data
    assert list(predicted.x) == ["#7 · 20/s", "#9 · 20/s"]
    assert predicted.error_y.array is not None and list(measured.y) == [8.0, 9.0]
    assert batching.convergence_frame(2, jobs).empty


def test_a_saturated_verify_leaves_the_line_on_the_profile_and_says_why() -> None:
    stored = refit(7, PROFILE, 3.0).model_copy(
        update={"calibrated": PROFILE, "not_adopted": "Not recalibrated: this run was saturated."}
    )

    profile, line = batching.profile_in_use(5, PROFILE, [verify_row(7, 90.0, stored)])

    assert profile == PROFILE
    assert line == (
        "Predictions rest on the profile from job #5, as measured. The newest Verify (job #7) "
        "did not move it: Not recalibrated: this run was saturated."
    )
