"""The comparison figures are readable: one labelled row per result in the latency spread,
every point of the scatter plots named in the legend (never as text beside it, where close
points' labels overlap), and room for axis titles and tick labels."""

from __future__ import annotations

import pytest

from optistudio.core.report.figures import (
    distribution_figure,
    legend_names,
    pareto_figure,
    point_label,
    throughput_figure,
)
from optistudio.core.report.snapshot import CompareSnapshot, ResultRow


def row(job: int, p50: float, *, batch: int = 1, backend: str = "onnxruntime") -> ResultRow:
    return ResultRow(
        key=f"{job}.{backend}.{batch}.2",
        job_id=job,
        model_id=job,
        model=f"m{job}",
        parent_id=None,
        backend=backend,
        batch_size=batch,
        threads=2,
        environment_id=1,
        metrics={
            "min_ms": p50 * 0.8,
            "p10_ms": p50 * 0.9,
            "p50_ms": p50,
            "p90_ms": p50 * 1.2,
            "p99_ms": p50 * 1.5,
            "throughput": 1000 * batch / p50,
            "cosine_error": 0.001 * job,
        },
    )


@pytest.fixture
def snapshot() -> CompareSnapshot:
    return CompareSnapshot(
        rows=[row(1, 2.0), row(2, 1.0, batch=8), row(3, 1.5, backend="openvino")]
    )


def test_the_latency_spread_gives_each_result_its_own_labelled_row(snapshot) -> None:
    figure = distribution_figure(snapshot)

    rows = [box.y for box in figure.data]
    assert rows == [(r.label,) for r in snapshot.rows]  # three rows, not one unlabelled row
    assert figure.layout.yaxis.type == "category" and figure.layout.yaxis.automargin


def test_a_spread_with_no_percentiles_says_why_it_is_empty() -> None:
    only_p50 = row(1, 2.0).model_copy(update={"metrics": {"p50_ms": 2.0}})

    figure = distribution_figure(CompareSnapshot(rows=[only_p50]))

    assert not figure.data
    assert "No selected result has stored percentiles" in figure.layout.annotations[0].text


@pytest.mark.parametrize("draw", [throughput_figure, pareto_figure], ids=["throughput", "pareto"])
def test_every_point_is_named_in_the_legend_and_no_text_sits_on_the_plot(snapshot, draw) -> None:
    figure = draw(snapshot)

    named = {
        trace.name: (trace.x[0], trace.y[0])
        for trace in figure.data
        if trace.mode == "markers" and trace.showlegend is not False
    }
    assert not [t for t in figure.data if "text" in (t.mode or "")]  # labels never overlap
    assert {"#1 onnxruntime b1", "#2 onnxruntime b8", "#3 openvino b1"} <= set(named)
    if draw is throughput_figure:
        assert named["#2 onnxruntime b8"] == (1.5, 8000.0)  # the entry names its own point


def test_rows_that_read_alike_get_legend_entries_of_their_own() -> None:
    twins = CompareSnapshot(rows=[row(1, 2.0), row(1, 1.0).model_copy(update={"key": "x"})])

    assert legend_names(twins) == ["#1 b1 (1.onnxruntime.1.2)", "#1 b1 (x)"]


def test_a_label_names_only_what_sets_the_results_apart() -> None:
    alike = CompareSnapshot(rows=[row(1, 2.0), row(2, 1.0, batch=8)])

    assert [point_label(alike, r) for r in alike.rows] == ["#1 b1", "#2 b8"]


@pytest.mark.parametrize("draw", [distribution_figure, throughput_figure, pareto_figure])
def test_axis_titles_and_labels_have_room(snapshot, draw) -> None:
    figure = draw(snapshot)

    assert figure.layout.margin.b >= 40 and figure.layout.margin.l >= 40
    assert figure.layout.xaxis.automargin and figure.layout.yaxis.automargin
