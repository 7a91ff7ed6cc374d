"""Comparison snapshot: deltas, best per column, environment warnings, and the report files."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

from optistudio.core.report.figures import pareto_figure
from optistudio.core.report.html import report_csv, report_html, report_json
from optistudio.core.report.metric_info import column_title
from optistudio.core.report.snapshot import (
    CompareSnapshot,
    ResultRow,
    axis_choices,
    environment_differences,
    pareto_title,
    shared_environment,
    table_metrics,
    table_records,
)

ENV_A = {"cpu_model": "Xeon A", "logical_cores": 2, "libraries": {"onnxruntime": "1.20.0"}}
ENV_B = {"cpu_model": "Xeon B", "logical_cores": 2, "libraries": {"onnxruntime": "1.19.2"}}


def row(
    job: int,
    p50: float,
    error: float | None,
    *,
    env: int = 1,
    threads: int = 2,
    task: dict[str, float | None] | None = None,
) -> ResultRow:
    metrics = (task or {}) | {
        "p10_ms": p50 * 0.9,
        "p50_ms": p50,
        "p90_ms": p50 * 1.2,
        "p99_ms": p50 * 1.5,
        "throughput": 1000 / p50,
        "cosine_error": error,
    }
    return ResultRow(
        key=f"{job}.onnxruntime.1.{threads}",
        job_id=job,
        model_id=job,
        model=f"m{job}",
        parent_id=None,
        backend="onnxruntime",
        batch_size=1,
        threads=threads,
        environment_id=env,
        metrics=metrics,
    )


@pytest.fixture
def snapshot() -> CompareSnapshot:
    return CompareSnapshot(
        title="tiny <variants>",
        rows=[row(1, 2.0, 0.0), row(2, 1.0, 0.01), row(3, 1.5, 0.05), row(4, 0.5, None)],
        baseline="1.onnxruntime.1.2",
        budget_ms=1.6,
        environments={"1": ENV_A},
    )


def test_deltas_are_against_the_baseline_and_best_follows_direction(snapshot) -> None:
    records = {r["key"]: r for r in table_records(snapshot)}
    fast = records["2.onnxruntime.1.2"]
    assert fast["p50_ms delta"] == pytest.approx(-0.5)
    assert fast["throughput delta"] == pytest.approx(1.0)
    assert records["1.onnxruntime.1.2"]["p50_ms delta"] == 0.0
    assert records["4.onnxruntime.1.2"]["p50_ms best"]  # lowest latency
    assert records["4.onnxruntime.1.2"]["throughput best"]  # highest throughput
    assert records["1.onnxruntime.1.2"]["cosine_error best"]  # the exact original
    assert records["4.onnxruntime.1.2"]["cosine_error delta"] is None
    assert [r["pareto"] for r in records.values()] == [True, True, False, False]
    assert records["2.onnxruntime.1.2"]["sweet spot"]  # most accurate of those within 1.6 ms


def test_column_titles_carry_units_and_directions() -> None:
    assert column_title("p99_ms") == "p99 latency (ms) ↓"
    assert column_title("throughput") == "throughput (inf/s) ↑"


def test_same_environment_gives_no_warning(snapshot) -> None:
    assert environment_differences(snapshot) == []


def test_the_report_names_the_one_environment_and_flags_contended_rows(snapshot) -> None:
    env = ENV_A | {"isa_flags": ["avx2", "avx512f"], "os": "Linux", "machine": "x86_64"}
    calm, busy = row(1, 1.0, 0.0), row(2, 0.9, 0.0)
    busy.metrics |= {"contended": 1.0, "stable": 1.0}
    calm.metrics |= {"contended": 0.0, "stable": 1.0}
    snap = CompareSnapshot(rows=[calm, busy], environments={"1": env})
    assert shared_environment(snap) == "Xeon A, 2 logical cores, Linux x86_64; ISA avx2 avx512f"
    assert (calm.flags, busy.flags) == ([], ["contended"])
    assert busy.label.endswith("· CONTENDED") and "CONTENDED" not in calm.label
    page = report_html(snap)
    assert "same environment: Xeon A, 2 logical cores" in page
    assert "Read with care" in page and page.count("CONTENDED") >= 2  # the warning and the table
    assert shared_environment(CompareSnapshot(rows=[calm])) == ""


def test_different_cpus_libraries_and_threads_are_named() -> None:
    snap = CompareSnapshot(
        rows=[row(1, 1.0, 0.0, env=1), row(2, 1.0, 0.0, env=2, threads=4), row(3, 1, 0, env=9)],
        environments={"1": ENV_A, "2": ENV_B},
    )
    text = "\n".join(environment_differences(snap))
    assert "Different CPU: Xeon A (job #1); Xeon B (job #2)" in text
    assert "Different onnxruntime version: 1.20.0 (job #1); 1.19.2 (job #2)" in text
    assert "Different threads: 2 (job #1, #3); 4 (job #2)" in text
    assert "1 result(s) have no recorded environment." in text
    assert "logical cores" not in text


def test_html_report_is_self_contained(snapshot) -> None:
    page = report_html(snapshot)
    assert page.startswith("<!DOCTYPE html>")
    assert "tiny &lt;variants&gt;" in page  # titles are escaped
    assert not re.search(r"<script[^>]+src=", page)  # nothing fetched from a network
    assert page.count("plotly.js v") == 1  # the library inlined once
    assert page.count('class="plotly-graph-div"') == 3
    assert "sweet spot with p50 latency under 1.6 ms: #2 m2" in page
    assert "Error vs p50 latency (Pareto frontier)" in page


def test_the_report_lists_where_a_variant_and_its_original_disagree(snapshot) -> None:
    flipped = snapshot.rows[1].model_copy(
        update={
            "task": "ctc_text",
            "disagreements": [
                {"sample": 7, "reference": "HELLO", "candidate": "HELL0", "severity": 0.2},
            ],
        }
    )
    page = report_html(snapshot.model_copy(update={"rows": [snapshot.rows[0], flipped]}))

    assert "Where variants and their originals disagree most" in page
    assert "(ctc_text)" in page
    assert "<td>7</td><td>HELLO</td><td>HELL0</td><td></td>" in page
    assert "disagree most" not in report_html(snapshot)  # nothing to drill into, no section


def test_csv_and_json_carry_the_same_rows(snapshot) -> None:
    rows = list(csv.DictReader(io.StringIO(report_csv(snapshot))))
    assert [r["key"] for r in rows] == [r.key for r in snapshot.rows]
    assert float(rows[1]["p50_ms"]) == 1.0
    data = json.loads(report_json(snapshot))
    assert data["sweet_spot"] == "2.onnxruntime.1.2"
    assert data["pareto_keys"] == ["1.onnxruntime.1.2", "2.onnxruntime.1.2"]
    assert CompareSnapshot.model_validate({k: data[k] for k in CompareSnapshot.model_fields})


# -- the Pareto axes: any stored metric, kept by the snapshot -------------------------------


@pytest.fixture
def glyph_snapshot() -> CompareSnapshot:
    """An original and three variants judged in a task's terms: the fastest reads worst."""
    return CompareSnapshot(
        title="glyphs",
        rows=[
            row(1, 2.0, 0.0, task={"glyph_agreement": 1.0, "glyph_error_rate": 0.0}),
            row(2, 1.0, 0.01, task={"glyph_agreement": 0.70, "glyph_error_rate": 0.2}),
            row(3, 1.5, 0.05, task={"glyph_agreement": 0.95, "glyph_error_rate": 0.01}),
            row(4, 1.8, 0.001, task={"glyph_agreement": 0.90, "glyph_error_rate": 0.3}),
        ],
        budget_ms=1.6,
        latency_metric="p90_ms",
        quality_metric="glyph_agreement",
    )


def test_a_snapshot_keeps_its_chosen_axes_through_json(glyph_task, glyph_snapshot) -> None:
    shared = CompareSnapshot.model_validate_json(glyph_snapshot.model_dump_json())

    assert shared == glyph_snapshot
    assert (shared.latency_metric, shared.quality_metric) == ("p90_ms", "glyph_agreement")
    assert shared.frontier() == [0, 1, 2]  # by glyph agreement; #4 is slower and reads worse
    assert shared.sweet_spot() == 1  # p90 within 1.6 ms: only #2 (1.2); #3's p90 is 1.8
    old = CompareSnapshot.model_validate({"rows": []})  # a share stored before axes were chosen
    assert (old.latency_metric, old.quality_metric) == ("p50_ms", "cosine_error")


def test_the_frontier_and_sweet_spot_follow_the_chosen_axes(glyph_task, glyph_snapshot) -> None:
    by_error = glyph_snapshot.model_copy(update={"quality_metric": "cosine_error"})
    by_rate = glyph_snapshot.model_copy(
        update={"latency_metric": "p50_ms", "quality_metric": "glyph_error_rate"}
    )

    assert by_error.frontier() == [0, 1, 3]  # #4 is exact enough to beat #3 on cosine
    assert by_rate.frontier() == [0, 1, 2]
    assert by_rate.sweet_spot() == 2  # within 1.6 ms p50: #2 and #3; #3 reads better


def test_the_report_plots_and_tabulates_the_chosen_axes(glyph_task, glyph_snapshot) -> None:
    page = report_html(glyph_snapshot)
    data = json.loads(report_json(glyph_snapshot))
    figure = pareto_figure(glyph_snapshot)

    assert "Glyph agreement vs p90 latency (Pareto frontier)" in page
    assert "sweet spot with p90 latency under 1.6 ms: #2 m2" in page
    assert "<th>Glyph agreement (0–1) ↑</th>" in page and "<th>Glyph error rate ↓</th>" in page
    assert figure.layout.xaxis.title.text == "p90 latency (ms) ↓, lower is better"
    assert figure.layout.yaxis.title.text == "Glyph agreement (0–1) ↑, higher is better"
    frontier = next(t for t in figure.data if t.name == "Pareto frontier")
    assert list(frontier.y) == [0.70, 0.95, 1.0]  # the task metric, not cosine
    assert (data["latency_metric"], data["quality_metric"]) == ("p90_ms", "glyph_agreement")
    assert data["pareto_keys"] == ["1.onnxruntime.1.2", "2.onnxruntime.1.2", "3.onnxruntime.1.2"]
    best = {r["key"] for r in data["table"] if r["glyph_agreement best"]}
    assert best == {"1.onnxruntime.1.2"}  # higher is better, from the evaluator


def test_axis_choices_are_the_metrics_some_row_has(glyph_task, glyph_snapshot) -> None:
    latency, quality = axis_choices(glyph_snapshot)

    assert latency == ["p50_ms", "p90_ms", "p99_ms", "p10_ms"]
    assert quality == ["cosine_error", "glyph_agreement", "glyph_error_rate"]
    assert table_metrics(glyph_snapshot)[-2:] == ["glyph_agreement", "glyph_error_rate"]
    assert pareto_title(glyph_snapshot) == "Glyph agreement vs p90 latency"


def test_a_shared_axis_without_a_known_direction_marks_no_frontier(glyph_snapshot) -> None:
    # the evaluator that measured glyph_agreement is not installed here
    assert glyph_snapshot.frontier() == [] and glyph_snapshot.sweet_spot() is None
    assert "'glyph_agreement' has no known better direction" in glyph_snapshot.axes_problem()
    page = report_html(glyph_snapshot)
    assert "has no known better direction here" in page
    assert "glyph_agreement" in table_metrics(glyph_snapshot)  # still shown, never ranked
    assert column_title("glyph_agreement") == "glyph_agreement"
