"""The comparison figures are readable: one labelled row per result in the latency spread,
every throughput-vs-p99 point named, and room for axis titles and tick labels."""

from __future__ import annotations

import pytest

from optistudio.core.report.figures import (
    distribution_figure,
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


def test_every_throughput_point_is_labelled(snapshot) -> None:
    figure = throughput_figure(snapshot)

    shown = {
        label: (x, y)
        for trace in figure.data
        if "text" in trace.mode
        for label, x, y in zip(trace.text, trace.x, trace.y, strict=True)
    }
    assert set(shown) == {"#1 onnxruntime b1", "#2 onnxruntime b8", "#3 openvino b1"}
    assert shown["#2 onnxruntime b8"] == (1.5, 8000.0)  # the label sits on its own point


def test_a_label_names_only_what_sets_the_results_apart() -> None:
    alike = CompareSnapshot(rows=[row(1, 2.0), row(2, 1.0, batch=8)])

    assert [point_label(alike, r) for r in alike.rows] == ["#1 b1", "#2 b8"]


@pytest.mark.parametrize("draw", [distribution_figure, throughput_figure, pareto_figure])
def test_axis_titles_and_labels_have_room(snapshot, draw) -> None:
    figure = draw(snapshot)

    assert figure.layout.margin.b >= 40 and figure.layout.margin.l >= 40
    assert figure.layout.xaxis.automargin and figure.layout.yaxis.automargin
