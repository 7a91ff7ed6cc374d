"""The studio's figures: batch sizes on a category axis in numeric order, log axes labelled
with plain numbers in order, and room for every axis title and tick label."""

from __future__ import annotations

import pandas as pd
import pytest

from optistudio.studio import charts


@pytest.fixture
def wide() -> pd.DataFrame:
    """Two benchmark jobs as the Results page holds them: the newer measured fewer sizes."""
    rows = [
        (job, size, 1.0 + size * 0.1)
        for job, sizes in ((9, [1, 8]), (4, [1, 2, 4, 8, 16]))
        for size in sizes
    ]
    return pd.DataFrame(
        {
            "job_id": [job for job, _, _ in rows],
            "model_name": "tiny",
            "backend": "onnxruntime",
            "batch_size": [size for _, size, _ in rows],
            "p10_ms": [ms * 0.9 for *_, ms in rows],
            "p50_ms": [ms for *_, ms in rows],
            "p90_ms": [ms * 1.1 for *_, ms in rows],
            "p99_ms": [ms * 1.3 for *_, ms in rows],
            "throughput": [size / ms * 1000 for _, size, ms in rows],
            "stable": 1.0,
            "contended": 0.0,
        }
    )


@pytest.mark.parametrize("draw", [charts.latency_by_batch, charts.throughput_by_batch])
def test_batch_sizes_are_categories_in_numeric_order(wide, draw) -> None:
    figure = draw(wide)

    axis = figure.layout.xaxis
    assert axis.type == "category"  # '1', '8' as strings still autotype to a linear axis
    assert list(axis.categoryarray) == ["1", "2", "4", "8", "16"]  # not 1, 8, 2, 4, 16
    assert {x for trace in figure.data for x in trace.x} <= set(axis.categoryarray)
    assert axis.title.text == "batch size"


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([3.0, 5.0, 8.0, 12.0, 20.0], [2.0, 5.0, 10.0, 20.0, 50.0]),
        ([0.4, 900.0], [0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]),
        ([6.04, 9.9, 31.0], [5.0, 10.0, 20.0, 30.0, 50.0]),
        ([5.2, 6.1], [5.2, 5.4, 5.6, 5.8, 6.0, 6.2]),  # under a factor of 1.5: even steps
    ],
    ids=["one-decade", "many-decades", "finer-steps", "narrow"],
)
def test_log_ticks_read_as_numbers_in_order(values, expected) -> None:
    axis = charts.log_axis(values)

    assert axis["tickvals"] == expected
    assert axis["ticktext"] == [f"{t:g}" for t in expected]


def test_a_log_axis_of_nothing_is_left_to_plotly() -> None:
    assert charts.log_axis([0.0, float("nan")]) == {"type": "log"}


def test_every_figure_has_room_for_its_titles_and_labels(wide) -> None:
    variants = [
        {
            "recipe": "int8",
            "speedup": 1.8,
            "mean cosine": 0.999,
            "chosen": True,
            "within budget": True,
        }
    ]
    comparisons = [
        {
            "job": 3,
            "A": "tiny",
            "B": "tiny int8",
            "ratio": 0.6,
            "low": 0.55,
            "high": 0.66,
            "verdict": "faster",
            "sentence": "B is faster",
            "margin": 0.02,
        }
    ]
    figures = [
        charts.latency_by_batch(wide),
        charts.throughput_by_batch(wide),
        charts.op_histogram({"Conv": 3, "Relu": 3, "Gemm": 1}),
        charts.ratio_intervals(comparisons),
        charts.speed_vs_accuracy(variants),
    ]
    for figure in figures:
        assert figure.layout.margin.b >= 40 and figure.layout.margin.l >= 40
        assert figure.layout.xaxis.automargin and figure.layout.yaxis.automargin


def variant_point(recipe: str, speedup: float, cosine: float | None, chosen: bool = False) -> dict:
    return {"recipe": recipe, "speedup": speedup, "mean cosine": cosine, "chosen": chosen} | {
        "within budget": True
    }


def test_close_points_are_named_by_the_legend_not_by_overlapping_labels() -> None:
    variants = [
        variant_point("INT8 static (MinMax)", 2.00, 0.9990, chosen=True),
        variant_point("INT8 static (Entropy)", 2.01, 0.9991),
        variant_point("FP16", 1.10, 0.99999),
    ]

    figure = charts.speed_vs_accuracy(variants)

    labelled = {trace.name: trace.mode for trace in figure.data}
    assert set(labelled) == {v["recipe"] for v in variants}  # every variant is in the legend
    assert labelled["INT8 static (MinMax)"] == labelled["INT8 static (Entropy)"] == "markers"
    assert labelled["FP16"] == "markers+text"


def test_a_run_without_timed_variants_has_no_points_to_chart() -> None:
    failed = [variant_point("FP16", 0.0, None), {"recipe": "fp32", "speedup": None}]

    assert charts.accuracy_points(failed) == []
    assert charts.isolated([]) == []


def test_the_charts_draw_the_newest_runs_only() -> None:
    import pandas as pd

    wide = pd.DataFrame(
        {"job_id": [job for job in range(1, 21) for _ in (1, 2)], "batch_size": [1, 8] * 20}
    )

    drawn = charts.latest_runs(wide, count=3)

    assert sorted(set(drawn["job_id"])) == [18, 19, 20] and len(drawn) == 6
