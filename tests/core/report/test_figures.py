"""The comparison figures are readable: one labelled row per result in the latency spread,
every point of the scatter plots named in the legend (never as text beside it, where close
points' labels overlap), and room for axis titles and tick labels."""

from __future__ import annotations

import pytest

from optistudio.core.report.figures import (
    distribution_figure,
    legend_names,
    pareto_figure,
    throughput_figure,
)
from optistudio.core.report.snapshot import CompareSnapshot, ResultRow


def row(
    job: int,
    p50: float,
    *,
    batch: int = 1,
    backend: str = "onnxruntime",
    model: str = "",
    recipe: str = "original",
    threads: int = 2,
) -> ResultRow:
    return ResultRow(
        key=f"{job}.{backend}.{batch}.{threads}",
        job_id=job,
        model_id=job,
        model=model or f"m{job}",
        parent_id=None,
        recipe=recipe,
        backend=backend,
        batch_size=batch,
        threads=threads,
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
    assert {
        "#1 m1 · onnxruntime · batch 1",
        "#2 m2 · onnxruntime · batch 8",
        "#3 m3 · openvino · batch 1",
    } <= set(named)
    if draw is throughput_figure:
        assert named["#2 m2 · onnxruntime · batch 8"] == (1.5, 8000.0)  # its own point
    assert figure.layout.legend.title.text == "all: original · fp32 · 2 threads"


def test_rows_that_read_alike_get_legend_entries_of_their_own() -> None:
    twins = CompareSnapshot(rows=[row(1, 2.0), row(1, 1.0).model_copy(update={"key": "x"})])

    assert legend_names(twins) == ["#1 (1.onnxruntime.1.2)", "#1 (x)"]


def test_a_legend_entry_names_what_sets_it_apart_and_the_title_what_all_share() -> None:
    alike = CompareSnapshot(rows=[row(1, 2.0, model="tiny"), row(2, 1.0, batch=8, model="tiny")])

    figure = throughput_figure(alike)

    assert legend_names(alike) == ["#1 batch 1", "#2 batch 8"]
    title = figure.layout.legend.title.text
    assert title == "all: tiny · original · onnxruntime · fp32 · 2 threads"


def test_an_optimize_runs_original_graph_and_fusion_variants_never_share_a_label() -> None:
    """Issue 40: all three read '#3 onnxruntime fp32 b1 t0' beside an OpenVINO BF16 run."""
    run = [
        row(3, 2.0, model="tiny", recipe=recipe, threads=0)
        for recipe in ("original", "Graph optimizations", "Fusion")
    ]
    bf16 = row(4, 1.0, model="tiny", backend="openvino", threads=0)
    rows = [r.model_copy(update={"key": f"v3.{i}"}) for i, r in enumerate(run)]
    snapshot = CompareSnapshot(rows=[*rows, bf16.model_copy(update={"precision": "bf16"})])

    names = legend_names(snapshot)
    labels = [r.label for r in snapshot.rows]

    assert len(set(names)) == len(names) and len(set(labels)) == len(labels)
    assert names[:3] == [
        "#3 original · onnxruntime · fp32",
        "#3 Graph optimizations · onnxruntime · fp32",
        "#3 Fusion · onnxruntime · fp32",
    ]
    assert labels[1] == (
        "#3 tiny · Graph optimizations [fp32] · onnxruntime · batch 1 · default threads"
    )
    assert not any(" t0" in text or " b1" in text for text in [*names, *labels])
    figure = pareto_figure(snapshot)
    assert figure.layout.legend.title.text == "all: tiny · batch 1 · default threads"


def test_a_point_hovers_with_its_full_label_and_rounding_reads_identical() -> None:
    exact = row(1, 2.0, model="tiny").model_copy(update={"metrics": {"p50_ms": 2.0}})
    exact.metrics["cosine_error"] = 1.055e-14
    rounded = row(2, 1.0, model="tiny", recipe="Fusion")
    rounded.metrics["cosine_error"] = 0.00123

    figure = pareto_figure(CompareSnapshot(rows=[exact, rounded]))

    hovers = {t.name: t.hovertext[0] for t in figure.data if t.hovertext}
    assert hovers["#1 original"].startswith(exact.label)
    assert "1 − mean cosine): identical" in hovers["#1 original"]
    assert "e-14" not in hovers["#1 original"]
    assert "0.00123" in hovers["#2 Fusion"]


@pytest.mark.parametrize("draw", [distribution_figure, throughput_figure, pareto_figure])
def test_axis_titles_and_labels_have_room(snapshot, draw) -> None:
    figure = draw(snapshot)

    assert figure.layout.margin.b >= 40 and figure.layout.margin.l >= 40
    assert figure.layout.xaxis.automargin and figure.layout.yaxis.automargin


def test_a_result_has_one_colour_in_every_chart(snapshot) -> None:
    """The frontier line shifts Plotly's colour cycle in one chart and not the other: each
    result keeps its own colour in the legend of both scatter plots and in the spread."""
    names = legend_names(snapshot)

    def colours(figure) -> dict[str, str]:
        return {t.name: t.marker.color for t in figure.data if t.name in names}

    pareto, throughput = colours(pareto_figure(snapshot)), colours(throughput_figure(snapshot))
    spread = [box.marker.color for box in distribution_figure(snapshot).data]

    assert pareto == throughput and len(set(pareto.values())) == len(snapshot.rows)
    assert spread == [pareto[name] for name in names]
