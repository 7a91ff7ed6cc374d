"""Compare names every result by what ran (issue 40, item 6): model, recipe, precision, backend,
batch and threads in words, so an original and its variants never read alike, in the table, the
legend and the downloaded report; float rounding against the original reads 'identical'."""

from __future__ import annotations

import pytest
from compare_seed import ENV, Seeded, benchmark, seed
from test_compare_variants import optimized

from optistudio.core.report.figures import legend_names, pareto_figure
from optistudio.core.report.html import report_html
from optistudio.studio.compare_services import Selection, build_snapshot, result_options

EXACT = {"mean_cosine": 1.0, "max_abs_error": 1.055e-14, "data": "synthetic"}


@pytest.fixture
def seeded(db_factory, app_settings, make_model) -> Seeded:
    return seed(
        db_factory,
        app_settings,
        make_model("tiny.onnx"),
        make_model("v.onnx", features=12),
        accuracy=EXACT,
    )


def test_a_benchmark_row_names_its_original_and_recipe(db_factory, seeded: Seeded) -> None:
    snapshot, _ = build_snapshot(db_factory, Selection(keys=seeded.keys[:2]))

    original, variant = snapshot.rows

    assert (original.model, original.recipe) == ("tiny", "original")
    assert (variant.model, variant.recipe) == ("tiny", "INT8 dynamic")  # not 'tiny · int8'
    job = variant.job_id
    assert variant.label == f"#{job} tiny · INT8 dynamic [int8] · onnxruntime · batch 1 · 2 threads"


def test_an_optimize_runs_rows_name_their_recipes_and_default_threads(
    db_factory, seeded: Seeded
) -> None:
    job = optimized(db_factory, seeded.original, seeded.variant)
    keys = [f"v{job}.o", f"v{job}.0", seeded.keys[0]]

    snapshot, _ = build_snapshot(db_factory, Selection(keys=keys))

    labels = [row.label for row in snapshot.rows]
    assert labels[0] == f"#{job} tiny · original [fp32] · onnxruntime · batch 1 · default threads"
    assert labels[1].startswith(f"#{job} tiny · NNCF INT8 + BF16 [int8+bf16] · openvino")
    assert len(set(labels)) == 3 and len(set(legend_names(snapshot))) == 3
    assert not any(" t0" in label for label in labels)


def test_default_threads_are_said_in_words_in_the_picker(db_factory, seeded: Seeded) -> None:
    with_default = benchmark(db_factory, seeded.original, 1, 1.0, ENV)
    options = result_options(db_factory)

    assert options[f"{with_default}.onnxruntime.1.2"].endswith("batch 1 · 2 threads")
    assert not any(option.endswith("0 threads") for option in options.values())


def test_the_report_reads_float_rounding_as_identical(db_factory, seeded: Seeded) -> None:
    snapshot, _ = build_snapshot(db_factory, Selection(keys=seeded.keys[:2]))

    page = report_html(snapshot)

    assert snapshot.rows[1].metrics["max_abs_error"] == pytest.approx(1.055e-14)
    assert "1.055e-14</td>" not in page and "title='1.055e-14'>identical</td>" in page
    assert "'identical': error or cosine within 1e-6 of the original's own" in page
    legend = pareto_figure(snapshot).layout.legend.title.text
    assert legend == "all: tiny · onnxruntime · batch 1 · 2 threads"
