"""The Batching page's logic without Streamlit: predictions, charts and exports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.simulate import simulate
from optistudio.core.batching.triton import parse_pbtxt
from optistudio.core.batching.tuner import recommend
from optistudio.core.model.intake import inspect_model
from optistudio.services.jobresults import VerifyBatches
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
    assert "with the model 10% slower" in figure.data[0].text[0]


def test_exports_for_our_runtime_and_triton(tiny_model: Path) -> None:
    settings = BatchingSettings(max_batch_size=8, timeout_ms=2.5, instances=2)
    info = inspect_model(tiny_model)

    document = json.loads(batching.pipeline_json("tiny.onnx", "onnxruntime", settings, {}))
    config = parse_pbtxt(batching.triton_text("tiny v2.onnx", info, settings))

    assert BatchingSettings(**document["batching"]) == settings
    assert config["name"] == "tiny_v2"
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 2500
    assert config["instance_group"][0]["count"] == 2


def test_model_without_batch_dim_is_explained(make_model) -> None:
    problem = batching.batching_problem(inspect_model(make_model(batch=1)))
    assert problem is not None and "fixed first dimension" in problem


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
    assert not warned and line.startswith("If the model runs 5% slower than profiled: p99 ")
    line, warned = batching.speed_note(PROFILE, settings, rate=460, p99_ms=knee.p99_ms)
    assert warned and "sit at their knee" in line
    line, warned = batching.speed_note(PROFILE, settings, rate=510, p99_ms=knee.p99_ms)
    assert warned and "the queue would keep growing" in line  # rho 1.02 * 1.05
