"""The Batching page's Verify without Streamlit: the run it sends, how it is judged against
its prediction, the profile the predictions rest on after its refit."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.recalibrate import recalibrate
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.simulate import simulate, simulate_band
from optistudio.core.batching.specs import LatencyProfileSpec
from optistudio.core.batching.verify_policy import VerifyPrediction
from optistudio.services.jobresults import VerifyBatches
from optistudio.studio import batching_figures as figures
from optistudio.studio import batching_verify as verify
from optistudio.studio import batching_whatif as whatif
from optistudio.studio.formatting import EMPTY
from optistudio.studio.job_view import JobView

PROFILE = LatencyProfile(batch_sizes=[1, 2, 4, 8], mean_ms=[2.0, 2.5, 3.5, 6.0])


def test_comparison_frame_holds_relative_errors() -> None:
    predicted = whatif.predict(PROFILE, BatchingSettings(), rate=200)
    measured = predicted.model_copy(update={"p99_ms": predicted.p99_ms * 2})

    frame = verify.comparison_frame(predicted, measured).set_index("figure")

    assert frame.loc["p99_ms", "error"] == pytest.approx(0.5)
    assert frame.loc["throughput", "error"] == 0


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
    note = verify.profile_mismatch(PROFILE, VerifyBatches.model_validate(stored))

    assert (note is None) if said is None else (said in note and "not from the batching" in note)


def test_a_verify_job_without_batches_says_nothing() -> None:
    assert verify.profile_mismatch(PROFILE, None) is None


@pytest.mark.parametrize(
    ("halves", "warned"), [((40.0, 44.0), False), ((30.0, 60.0), True), (None, None)]
)
def test_the_page_says_how_settled_the_measured_p99_is(halves, warned) -> None:  # type: ignore[no-untyped-def]
    measured = whatif.predict(PROFILE, BatchingSettings(), rate=200)
    note = verify.tail_note(measured.model_copy(update={"p99_ms": 42.0}), halves)

    if halves is None:  # too short a run to split, or stored before halves were kept
        assert note is None
        return
    line, warning = note
    assert f"first half {halves[0]:.1f} ms, in its second {halves[1]:.1f} ms" in line
    assert warning is warned and (("verify for longer" in line) is warned)


def test_verify_sends_the_requests_the_profile_timed() -> None:
    served = LatencyProfileSpec(
        backend="openvino",
        threads=1,
        spin_wait=True,
        shapes={"audio": [1, 16000], "state": [2, 1, 128]},
        dims={"frames": 100},
        values={"sr": 16000},
        inputs_file="request.npz",
    )
    settings = BatchingSettings(max_batch_size=4, timeout_ms=1)

    spec = verify.verify_spec(served, settings, rate=50, seconds=2)

    timing = {"max_batch_size", "min_seconds", "probe_time_scale"}  # how the profile timed
    carried = set(LatencyProfileSpec.model_fields) - timing
    assert {name: getattr(spec, name) for name in carried} == served.model_dump(include=carried)
    assert (spec.settings, spec.rate, spec.seconds) == (settings, 50, 2)
    assert verify.request_line(served) == (
        "audio=1,16000; state=2,1,128; frames=100; sr filled with 16000; "
        "the arrays of the profile's .npz"
    )
    assert verify.request_line(LatencyProfileSpec()) == "the model's default inputs"


@pytest.mark.parametrize(
    ("measured_p99", "where", "inside"),
    [(11.0, "inside", True), (20.0, "above", False), (5.0, "below", False)],
    ids=["inside", "above", "below"],
)
def test_a_verify_is_judged_by_whether_its_p99_falls_in_the_band(
    measured_p99: float, where: str, inside: bool
) -> None:
    predicted = whatif.predict(PROFILE, BatchingSettings(), rate=200)
    predicted = predicted.model_copy(update={"p99_ms": 10.0})
    band = whatif.predict_band(PROFILE, BatchingSettings(), rate=200).model_copy(
        update={"p99_low_ms": 8.0, "p99_high_ms": 12.0}
    )
    measured = predicted.model_copy(update={"p99_ms": measured_p99})

    line, verdict = verify.band_verdict(predicted, band, measured)

    assert verdict is inside
    assert f"lies {where} the predicted band 8-12 ms (±20% of the predicted 10 ms)" in line


def test_the_realised_arrival_rate_is_shown_beside_the_offered_one() -> None:
    measured = whatif.predict(PROFILE, BatchingSettings(), rate=200)
    short = measured.model_copy(update={"realised_rate": 170.0})

    line, warned = verify.rate_line(measured)  # type: ignore[misc]
    assert not warned and "of the 200 offered" in line
    line, warned = verify.rate_line(short)  # type: ignore[misc]
    assert warned and "170 req/s of the 200 offered (-15%)" in line
    assert verify.rate_line(measured.model_copy(update={"realised_rate": None})) is None


def test_the_comparison_holds_the_band_and_the_prediction_at_the_realised_rate() -> None:
    settings = BatchingSettings()
    predicted = whatif.predict(PROFILE, settings, rate=200)
    band = whatif.predict_band(PROFILE, settings, rate=200)
    at_realised = whatif.predict(PROFILE, settings, rate=180)
    measured = predicted.model_copy(update={"p99_ms": band.p99_high_ms * 2})

    frame = verify.comparison_frame(predicted, measured, band, at_realised).set_index("figure")

    assert frame.loc["p99_ms", "high"] == band.p99_high_ms and not frame.loc["p99_ms", "inside"]
    assert frame.loc["throughput", "low"] == band.throughput_low
    assert frame.loc["throughput", "predicted at realised rate"] == at_realised.throughput
    bars = figures.comparison_figure(frame.reset_index()).data[0].error_y
    assert bars.array is not None and max(bars.array) > 0  # the band on the predicted bars


def test_the_verify_table_names_each_figure_and_leaves_no_empty_cell() -> None:
    settings = BatchingSettings()
    predicted = whatif.predict(PROFILE, settings, rate=200)
    band = whatif.predict_band(PROFILE, settings, rate=200)
    measured = predicted.model_copy(update={"p99_ms": band.p99_high_ms * 2, "p50_ms": 2453.2})

    frame = verify.comparison_frame(predicted, measured, band)
    table = verify.verify_table(frame).set_index("figure")

    assert list(table.index) == [
        "throughput (req/s)",
        "p50 (ms)",
        "p90 (ms)",
        "p99 (ms)",
        "mean batch size",
        "mean queue wait (ms)",
    ]
    assert list(table.columns) == [
        "predicted",
        "measured",
        "error",
        "band low",
        "band high",
        "inside the band",
    ]
    assert table.loc["p50 (ms)", "measured"] == "2453"  # three digits, never 2.45e+03
    assert table.loc["throughput (req/s)", "error"] == "0.0%"
    assert table.loc["p99 (ms)", "inside the band"] == "no"
    assert table.loc["mean queue wait (ms)", "band low"] == EMPTY  # the band has none
    assert list(frame["figure"]) == list(whatif.FIGURES)  # the frame itself keeps the keys


def verify_row(
    job: int, p99_ms: float, prediction: VerifyPrediction | None, status: str = "succeeded"
) -> JobView:
    """A Verify job as `recent_jobs` gives it: its measured p99 and what it stored of its
    prediction and refit (None: stored before Verify recalibrated)."""
    measured = simulate(PROFILE, SETTINGS, rate=20, requests=500).model_copy(
        update={"p99_ms": p99_ms}
    )
    result = SimpleNamespace(measured=measured, prediction=prediction)
    return JobView(id=job, kind="Verify", status=status, result=result)


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

    profile, line = verify.profile_in_use(5, PROFILE, jobs)
    before = whatif.predict(PROFILE, SETTINGS, rate=20).p50_ms
    after = whatif.predict(profile, SETTINGS, rate=20).p50_ms

    assert profile == second.calibrated
    assert profile.calibration is not None and profile.calibration.previous == ["Verify #7"]
    assert after / before == pytest.approx(1.2, abs=0.04)
    assert line.startswith(
        "Predictions rest on the profile from job #5, recalibrated by Verify #9 (after Verify #7)"
    )
    assert "the service time moved at batch 1 +20 %" in line  # both refits together
    assert "moved the predicted p99 from" in line and "(measured 9 ms)" in line
    assert verify.profile_in_use(5, PROFILE, jobs[2:3]) == (
        PROFILE,
        "Predictions rest on the profile from job #5, as measured.",
    )


def test_the_convergence_chart_has_a_point_per_verify_of_the_profile_in_order() -> None:
    first = refit(7, PROFILE, 1.2)
    jobs = [verify_row(9, 9.0, refit(9, first.calibrated, 1.0)), verify_row(7, 8.0, first)]

    frame = verify.convergence_frame(5, jobs)
    figure = figures.convergence_figure(frame)

    assert list(frame["verify"]) == ["#7", "#9"]
    assert list(frame["measured_p99_ms"]) == [8.0, 9.0]
    assert (frame["p99_low_ms"] <= frame["p99_high_ms"]).all()
    predicted, measured = figure.data
    assert list(predicted.x) == ["#7 · 20/s", "#9 · 20/s"]
    assert predicted.error_y.array is not None and list(measured.y) == [8.0, 9.0]
    assert verify.convergence_frame(2, jobs).empty


def test_a_saturated_verify_leaves_the_line_on_the_profile_and_says_why() -> None:
    stored = refit(7, PROFILE, 3.0).model_copy(
        update={"calibrated": PROFILE, "not_adopted": "Not recalibrated: this run was saturated."}
    )

    profile, line = verify.profile_in_use(5, PROFILE, [verify_row(7, 90.0, stored)])

    assert profile == PROFILE
    assert line == (
        "Predictions rest on the profile from job #5, as measured. The newest Verify (job #7) "
        "did not move it: Not recalibrated: this run was saturated."
    )
