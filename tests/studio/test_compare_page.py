"""Compare page logic: URL round trip, snapshots from stored results, share links; the page itself
through Streamlit's AppTest against a real migrated SQLite database."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from compare_seed import ENV, Seeded, benchmark, seed

from optistudio.core.numerics.accuracy import AccuracyReport
from optistudio.core.numerics.evaluators.base import (
    Disagreement,
    EvaluatorInfo,
    MetricInfo,
    evaluators,
)
from optistudio.core.report.snapshot import axis_choices, environment_differences
from optistudio.studio.compare_services import (
    Selection,
    build_snapshot,
    fit_axes,
    read_selection,
    result_options,
    revoke,
    share_snapshot,
    shared_snapshot,
    write_selection,
)
from tests.studio.conftest import app_page, view_page

COMPARE = "optistudio.studio.views.compare"


@pytest.fixture
def seeded(db_factory, app_settings, make_model) -> Seeded:
    return seed(
        db_factory, app_settings, make_model("tiny.onnx"), make_model("v.onnx", features=12)
    )


def test_selection_round_trips_through_the_url() -> None:
    chosen = Selection(keys=["3.onnxruntime.1.2", "4.openvino.8.0"], baseline="4.openvino.8.0")
    chosen.budget_ms = 2.5
    params: dict[str, str] = {"other": "kept"}
    write_selection(params, chosen)
    assert params == {
        "other": "kept",
        "results": "3.onnxruntime.1.2,4.openvino.8.0",
        "baseline": "4.openvino.8.0",
        "budget": "2.5",
    }
    assert read_selection(params) == chosen
    write_selection(params, Selection())
    assert params == {"other": "kept"}


def test_bad_urls_give_problems_not_errors() -> None:
    got = read_selection(
        {
            "results": "1.onnxruntime.1.2,<script>,1.onnxruntime.1.2,",
            "baseline": "9.x.1.1",
            "budget": "fast",
        }
    )
    assert got.keys == ["1.onnxruntime.1.2"]
    assert got.baseline is None
    assert got.budget_ms is None
    assert len(got.problems) == 2 and "'<script>'" in got.problems[0]


def test_snapshot_of_stored_results(db_factory, seeded: Seeded) -> None:
    options = result_options(db_factory)
    assert list(options) == seeded.keys[::-1]  # newest first
    wanted = Selection(keys=[*seeded.keys, "999.onnxruntime.1.2"], baseline=seeded.keys[0])
    snapshot, missing = build_snapshot(db_factory, wanted)
    assert missing == ["999.onnxruntime.1.2"]
    assert [r.key for r in snapshot.rows] == seeded.keys
    original, variant, big = snapshot.rows
    assert original.metrics["cosine_error"] == 0.0  # the reference itself
    assert variant.metrics["cosine_error"] == pytest.approx(0.01)
    assert variant.parent_id == seeded.original and variant.precision == "int8"
    assert "[int8]" in variant.label and "[int8]" in options[seeded.keys[1]]
    assert "[fp32]" in original.label and "[fp32]" in options[seeded.keys[0]]
    assert "accuracy from optimize job" in variant.accuracy_note
    assert snapshot.frontier() == [0, 1]  # the b8 run is slower and no more exact
    assert any("Test CPU" in d and "Other CPU" in d for d in environment_differences(snapshot))


def test_a_result_is_labelled_with_the_precision_it_ran_at(db_factory, seeded: Seeded) -> None:
    # An OpenVINO BF16 run of the FP32 original, and of the INT8 variant (INT8 weights, the
    # rest in BF16): the run's precision, not only the file's.
    bf16 = {"backend": "openvino", "precision": "bf16"}
    on_original = benchmark(db_factory, seeded.original, 1, 0.5, ENV, spec=bf16)
    on_variant = benchmark(db_factory, seeded.variant, 1, 0.4, ENV, spec=bf16)
    keys = [f"{on_original}.onnxruntime.1.2", f"{on_variant}.onnxruntime.1.2"]
    snapshot, _ = build_snapshot(db_factory, Selection(keys=keys))
    assert [r.precision for r in snapshot.rows] == ["bf16", "int8+bf16"]
    assert "[bf16]" in snapshot.rows[0].label
    assert "[int8+bf16]" in result_options(db_factory)[keys[1]]


def test_share_is_frozen_and_revocable(db_factory, seeded: Seeded) -> None:
    snapshot, _ = build_snapshot(db_factory, Selection(keys=seeded.keys[:2]))
    token = share_snapshot(db_factory, snapshot, owner="local")
    benchmark(db_factory, seeded.original, 1, 0.1, ENV)  # a newer, faster result arrives
    assert shared_snapshot(db_factory, token) == snapshot
    assert not revoke(db_factory, token=token, owner="mallory")
    assert revoke(db_factory, token=token, owner="local")
    assert shared_snapshot(db_factory, token) is None
    assert shared_snapshot(db_factory, "not a token") is None


def test_page_renders_the_url_selection_and_shares_it(db_factory, seeded, fresh_studio) -> None:
    keys = ",".join([*seeded.keys, "77.onnxruntime.1.1"])
    at = view_page(COMPARE, query={"results": keys, "budget": "1.5"})
    at.run()
    assert not at.exception
    assert any("not stored" in w.value for w in at.warning)
    assert any("Environments differ" in w.value for w in at.warning)
    assert any("Sweet spot within 1.5 ms" in s.value for s in at.success)
    assert at.multiselect[0].value == seeded.keys
    assert at.query_params["results"] == ",".join(seeded.keys)  # the unknown one dropped
    assert len(at.get("plotly_chart")) == 3
    at.multiselect[0].set_value(seeded.keys[:2]).run()  # the widget writes the URL back
    assert at.query_params["results"] == ",".join(seeded.keys[:2])
    assert at.query_params["budget"] == "1.5"
    next(b for b in at.button if b.label == "Share").click().run()
    token = _token(at)
    shared = app_page(query={"share": token})
    shared.run()
    assert not shared.exception
    assert shared.title[0].value.startswith("2 results")
    assert len(shared.get("plotly_chart")) == 3
    assert not shared.get("multiselect") and not shared.button  # read-only: nothing to submit


def _token(at: Any) -> str:
    code = at.get("code")[0].value
    return code.rsplit("share=", 1)[1].strip()


@pytest.mark.parametrize("token", ["", "garbage", "A" * 43, "x' OR 1=1 --"])
def test_unknown_or_malformed_share_is_a_plain_not_found(db_factory, fresh_studio, token) -> None:
    at = app_page(query={"share": token})
    at.run()
    assert not at.exception
    assert [t.value for t in at.title] == ["Not found"]
    assert not at.error


def test_empty_history_and_empty_selection_have_useful_messages(db_factory, fresh_studio) -> None:
    at = view_page(COMPARE)
    at.run()
    assert not at.exception
    assert any("No stored results yet" in i.value for i in at.info)


# -- the Pareto axes: task metrics of the stored accuracy reports ---------------------------

GLYPHS = EvaluatorInfo(
    name="compare_test_glyphs",
    label="Glyph reading (test task)",
    description="A task made up for the Compare tests.",
    metrics=[
        MetricInfo(name="glyph_agreement", label="Glyph agreement", higher_is_better=True),
        MetricInfo(name="glyph_error_rate", label="Glyph error rate", higher_is_better=False),
        MetricInfo(
            name="glyph_accuracy", label="Glyph accuracy", higher_is_better=True, needs_labels=True
        ),
    ],
    default_budget={"glyph_agreement": 0.99},
    implementation="optistudio.core.numerics.evaluators.base:Evaluator",
)
TASK_METRICS = {"glyph_agreement": 0.93, "glyph_error_rate": 0.02, "glyph_accuracy": 0.81}


@pytest.fixture
def glyph_task() -> Iterator[EvaluatorInfo]:
    evaluators.register(GLYPHS)
    yield GLYPHS
    evaluators._entries.pop(GLYPHS.name, None)  # the registry has no unregister; tests only


@pytest.fixture
def judged(db_factory, app_settings, make_model, glyph_task) -> Seeded:
    """The seeded history, its variant judged in the glyph task's terms."""
    report = AccuracyReport(
        samples=32,
        data="user",
        max_abs_error=0.05,
        mean_abs_error=0.004,
        mean_cosine=0.99,
        min_cosine=0.95,
        per_output_max_abs_error={"y": 0.05},
        nan_or_inf=False,
        task=GLYPHS.name,
        task_mode="labels",
        task_metrics=TASK_METRICS,
        worst=[Disagreement(sample=3, reference="ab", candidate="ad", severity=0.5)],
    )
    return seed(
        db_factory,
        app_settings,
        make_model("tiny.onnx"),
        make_model("v.onnx", features=12),
        accuracy=report.model_dump(mode="json"),
    )


def test_a_variant_brings_every_task_metric_of_its_report(db_factory, judged: Seeded) -> None:
    snapshot, _ = build_snapshot(db_factory, Selection(keys=judged.keys))
    original, variant, big = snapshot.rows

    assert {k: variant.metrics[k] for k in TASK_METRICS} == TASK_METRICS
    assert variant.task == GLYPHS.name and variant.disagreements[0]["candidate"] == "ad"
    assert original.disagreements == [] and original.task is None
    assert variant.metrics["min_cosine"] == 0.95 and variant.metrics["mean_abs_error"] == 0.004
    assert variant.metrics["cosine_error"] == pytest.approx(0.01)
    for reference in (original, big):  # the original agrees with itself, by definition
        assert reference.metrics["glyph_agreement"] == 1.0
        assert reference.metrics["glyph_error_rate"] == 0.0
        assert "glyph_accuracy" not in reference.metrics  # against labels: not known
    assert axis_choices(snapshot)[1] == [
        "cosine_error",
        "mean_cosine",
        "max_abs_error",
        "top1_agreement",
        "min_cosine",
        "mean_abs_error",
        "glyph_accuracy",
        "glyph_agreement",
        "glyph_error_rate",
    ]


def test_the_axes_round_trip_through_the_url() -> None:
    chosen = Selection(keys=["3.onnxruntime.1.2"], latency_metric="p90_ms")
    chosen.quality_metric = "glyph_agreement"
    params: dict[str, str] = {}
    write_selection(params, chosen)
    assert params == {
        "results": "3.onnxruntime.1.2",
        "latency": "p90_ms",
        "quality": "glyph_agreement",
    }
    assert read_selection(params) == chosen
    write_selection(params, Selection(keys=["3.onnxruntime.1.2"]))  # defaults stay out
    assert params == {"results": "3.onnxruntime.1.2"}
    bad = read_selection({"quality": "<b>x</b>"})
    assert bad.quality_metric == "cosine_error" and "not a metric name" in bad.problems[0]


def test_an_axis_no_result_has_falls_back_with_a_reason(db_factory, seeded: Seeded) -> None:
    wanted = Selection(keys=seeded.keys, latency_metric="p95_ms", quality_metric="glyph_agreement")
    snapshot, _ = build_snapshot(db_factory, wanted)

    problems = fit_axes(snapshot, wanted)

    assert len(problems) == 2 and "'glyph_agreement'" in problems[1]
    assert (wanted.latency_metric, wanted.quality_metric) == ("p50_ms", "cosine_error")
    assert (snapshot.latency_metric, snapshot.quality_metric) == ("p50_ms", "cosine_error")


def test_the_page_plots_the_chosen_task_metric_and_shares_it(
    db_factory, judged, fresh_studio
) -> None:
    keys = ",".join(judged.keys[:2])
    at = view_page(COMPARE, query={"results": keys, "quality": "glyph_agreement"})
    at.run()
    assert not at.exception
    x_axis, y_axis = (s for s in at.selectbox if s.label.startswith("Chart:"))
    assert (x_axis.value, y_axis.value) == ("p50_ms", "glyph_agreement")
    assert "Glyph agreement vs p50 latency" in [h.value for h in at.subheader]
    x_axis.set_value("p90_ms").run()
    assert at.query_params["latency"] == "p90_ms"
    assert "Glyph agreement vs p90 latency" in [h.value for h in at.subheader]
    next(b for b in at.button if b.label == "Share").click().run()
    token = _token(at)
    stored = shared_snapshot(db_factory, token)
    assert (stored.latency_metric, stored.quality_metric) == ("p90_ms", "glyph_agreement")
    shared = app_page(query={"share": token})
    shared.run()
    assert not shared.exception
    assert "Glyph agreement vs p90 latency" in [h.value for h in shared.subheader]
    assert not shared.get("selectbox")  # read-only: the axes are the sender's
