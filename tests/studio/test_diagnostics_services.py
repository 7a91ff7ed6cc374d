"""The Diagnostics page's logic on a real (SQLite) database and real profile results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from diagnostic_models import build_cnn, quantize_cnn

from optistudio.core.diagnose.diagnostics import DiagnosticsReport, DiagnosticsSpec, diagnose
from optistudio.core.measure.soak import SoakSpec, soak
from optistudio.db.models import JobKind, JobStatus
from optistudio.db.queries import create_job, finish_job, set_job_result
from optistudio.db.session import transaction
from optistudio.services.catalog import add_model_file
from optistudio.services.jobkinds import BATCHING_VERIFY, OperatorProfileJobSpec
from optistudio.services.jobresults import BatchingVerifyJobResult
from optistudio.studio import diagnostics_services as diag


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> DiagnosticsReport:
    folder = tmp_path_factory.mktemp("diag_services")
    cnn = build_cnn(folder / "cnn.onnx")
    qdq = quantize_cnn(cnn, folder / "qdq.onnx", mode="static")
    spec = DiagnosticsSpec(runs=3, warmup_runs=1, postprocessing=["softmax"])
    return diagnose(cnn, spec, work_dir=folder / "work", variant=qdq)


def _finished_job(factory, model_id: int, kind: JobKind, result: dict) -> int:  # type: ignore[no-untyped-def]
    with transaction(factory) as s:
        job_id = create_job(s, kind=kind, spec={}, model_id=model_id).id
        set_job_result(s, job_id=job_id, result=result)
        finish_job(s, job_id=job_id, status=JobStatus.succeeded, message="done")
    return job_id


def test_variant_choices_are_the_models_family(db_factory, app_settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cnn = build_cnn(tmp_path / "cnn.onnx")
    original = add_model_file(db_factory, app_settings, cnn, name="cnn").model_id
    qdq = quantize_cnn(cnn, tmp_path / "q.onnx", mode="static")
    variant = add_model_file(
        db_factory, app_settings, qdq, name="cnn int8", parent_id=original, precision="int8"
    ).model_id
    unrelated = add_model_file(
        db_factory, app_settings, quantize_cnn(cnn, tmp_path / "d.onnx", mode="dynamic"), name="x"
    ).model_id

    from_original = diag.variant_choices(db_factory, model_id=original)
    from_variant = diag.variant_choices(db_factory, model_id=variant)

    assert [(c["id"], c["related"]) for c in from_original] == [(variant, True), (unrelated, False)]
    assert "(int8)" in from_original[0]["label"]
    assert "not a variant" in from_original[1]["label"]
    assert [(c["id"], c["related"]) for c in from_variant] == [(original, True), (unrelated, False)]


def test_queue_wait_shows_only_when_a_batching_result_has_it(
    db_factory, app_settings, tiny_model
) -> None:  # type: ignore[no-untyped-def]
    model_id = add_model_file(db_factory, app_settings, tiny_model, name="tiny").model_id
    _finished_job(db_factory, model_id, JobKind.optimize, {"variants": []})

    assert diag.queue_wait(db_factory, model_id=model_id) is None

    job_id = _finished_job(db_factory, model_id, JobKind.batching_verify, _verified(3.5))
    wait = diag.queue_wait(db_factory, model_id=model_id)

    assert wait is not None and wait.queue_ms == 3.5 and wait.job == job_id
    assert wait.kind == BATCHING_VERIFY.label


def _verified(queue_ms: float) -> dict[str, Any]:
    measured = {
        "throughput": 100.0,
        "p50_ms": 5.0,
        "p90_ms": 7.0,
        "p99_ms": 9.0,
        "mean_ms": 5.5,
        "mean_queue_ms": queue_ms,
        "mean_compute_ms": 1.0,
        "mean_batch_size": 2.0,
        "completed": 10,
    }
    requests = {"sent_ms": [], "queue_ms": [], "compute_ms": [], "latency_ms": []}
    result = BatchingVerifyJobResult.model_validate({"measured": measured, "requests": requests})
    return result.model_dump(mode="json")


def test_breakdown_frame_puts_queue_wait_first_when_measured(report: DiagnosticsReport) -> None:
    without = diag.breakdown_frame(report.breakdown, None)
    wait = diag.QueueWait(job=7, kind="Batching verification", queue_ms=2.0)
    with_wait = diag.breakdown_frame(report.breakdown, wait)

    assert list(without["stage"]) == ["inference", "post-processing"]
    assert list(with_wait["stage"]) == ["queue wait", "inference", "post-processing"]
    assert "job #7" in with_wait["detail"].iloc[0]
    assert len(diag.breakdown_figure(with_wait).data) == 3


def test_profile_tables_and_charts_from_a_real_result(report: DiagnosticsReport) -> None:
    assert report.comparison is not None
    top = diag.top_nodes_frame(report.profile, n=3)
    comparison = diag.comparison_frame(report.comparison)
    layers = diag.layer_error_frame(report.layer_errors)

    assert len(top) == 3 and set(top["precision"]) <= {"fp32", "?"}
    assert "Conv" in set(comparison["op family"])
    assert list(layers["rank"]) == list(range(1, len(layers) + 1))
    assert "conv2" in set(layers["node (original graph)"])
    assert diag.op_type_figure(report.profile).data[0].orientation == "h"
    assert len(diag.comparison_figure(report.comparison).data) == 2
    assert len(diag.layer_error_figure(report.layer_errors).data[0].y) == len(layers)


def test_soak_figure_has_rss_and_the_fit(tiny_model: Path) -> None:
    result = soak(tiny_model, SoakSpec(seconds=0.5, sample_interval_s=0.02))

    figure = diag.soak_figure(result)

    assert [trace.name for trace in figure.data] == ["RSS", "fitted growth"]


def test_submitting_a_profile_commits_the_job_then_sends_its_id(
    db_factory, app_settings, tiny_model
) -> None:  # type: ignore[no-untyped-def]
    model_id = add_model_file(db_factory, app_settings, tiny_model, name="tiny").model_id
    sent: list[tuple[str, list[Any]]] = []

    job_id = diag.submit_operator_profile(
        db_factory,
        model_id=model_id,
        spec=OperatorProfileJobSpec(runs=2),
        send=lambda name, args: sent.append((name, args)) or "task-1",
    )

    assert sent == [("optistudio.operator_profile", [job_id])]
    jobs = diag.diagnostic_jobs(db_factory, kind=JobKind.operator_profile, model_id=model_id)
    assert [j.id for j in jobs] == [job_id] and jobs[0].status == "queued"


def _layer_row(rank: int, **fields: Any) -> dict[str, Any]:
    row = {
        "rank": rank,
        "node": "",
        "op_type": "Div",
        "graph_index": rank,
        "fed_by": [],
        "quantized_node": "",
        "sqnr_db": 30.0 - rank,
        "cosine": 0.99,
        "noise_added": 0.001,
    }
    return row | fields


def test_the_layer_chart_has_one_bar_per_unnamed_node() -> None:
    long = "/encoder/layer.0/attention/self/query/MatMul_and_a_long_suffix"
    rows = [
        _layer_row(1, label="Div #9", short_label="Div #9"),
        _layer_row(2, label="Div #5", short_label="Div #5"),
        _layer_row(3, label=long, short_label=diag.shorten(long), node=long, op_type="MatMul"),
    ]

    figure = diag.layer_error_figure(rows)
    table = diag.layer_error_frame(rows)

    bars = figure.data[0]
    assert len(set(bars.y)) == len(rows)
    assert list(figure.layout.yaxis.ticktext) == [diag.shorten(long), "Div #5", "Div #9"]
    assert long in bars.hovertext[0]
    assert table["node (original graph)"].map(len).max() <= 32
    assert list(table["full name"]) == ["Div #9", "Div #5", long]


def test_layer_rows_stored_before_labels_still_draw_one_bar_each() -> None:
    rows = [_layer_row(rank) for rank in (1, 2, 3)]  # all read "Div", graph index 9, no name

    figure = diag.layer_error_figure(rows)

    assert len(set(figure.data[0].y)) == 3


def test_many_op_types_fold_into_one_bar_and_the_slowest_share_stays_whole() -> None:
    from optistudio.core.diagnose.operator_profile import OperatorProfile

    op_types = [
        {"op_type": f"Op{i}", "time_us": 100.0 - i, "share": 0.05, "nodes": 1, "precisions": {}}
        for i in range(diag.TOP_OP_TYPES + 5)
    ]
    profile = OperatorProfile.model_validate(
        {"model": "m.onnx", "sha256": "0" * 64, "inputs": [], "outputs": [], "backend": "ort"}
        | {"batch_size": 1, "runs": 3, "quantized": False, "node_total_us": 1.0}
        | {"profiled_ms": 1.0, "plain_ms": 1.0, "overhead": 1.0, "nodes": []}
        | {"op_types": op_types}
    )

    figure = diag.op_type_figure(profile)

    bars = figure.data[0]
    assert len(bars.y) == diag.TOP_OP_TYPES + 1 and bars.y[-1] == "5 more op types"
    assert bars.y[0] == "Op0" and figure.layout.yaxis.autorange == "reversed"  # slowest on top
    assert bars.cliponaxis is False and figure.layout.xaxis.range[1] > max(bars.x)
    assert figure.layout.xaxis.automargin and figure.layout.yaxis.automargin


def test_a_long_list_of_nodes_is_cut_in_the_sentence() -> None:
    names = [f"conv{i}" for i in range(diag.NAMES_SHOWN + 3)]

    line = diag.not_in_precision_line(names, "int8")

    assert line.startswith("Not in int8: conv0, conv1") and line.endswith(" and 3 more.")
    assert diag.not_in_precision_line(["conv0"], "int8") == "Not in int8: conv0."
