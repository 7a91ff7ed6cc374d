"""Comparison snapshot: deltas, best per column, environment warnings, and the report files."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

from optistudio.core.report.html import report_csv, report_html, report_json
from optistudio.core.report.snapshot import (
    CompareSnapshot,
    ResultRow,
    column_title,
    environment_differences,
    table_records,
)

ENV_A = {"cpu_model": "Xeon A", "logical_cores": 2, "libraries": {"onnxruntime": "1.20.0"}}
ENV_B = {"cpu_model": "Xeon B", "logical_cores": 2, "libraries": {"onnxruntime": "1.19.2"}}


def row(job: int, p50: float, error: float | None, *, env: int = 1, threads: int = 2) -> ResultRow:
    metrics = {
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
    assert "sweet spot under 1.6 ms: #2 m2" in page


def test_csv_and_json_carry_the_same_rows(snapshot) -> None:
    rows = list(csv.DictReader(io.StringIO(report_csv(snapshot))))
    assert [r["key"] for r in rows] == [r.key for r in snapshot.rows]
    assert float(rows[1]["p50_ms"]) == 1.0
    data = json.loads(report_json(snapshot))
    assert data["sweet_spot"] == "2.onnxruntime.1.2"
    assert data["pareto_keys"] == ["1.onnxruntime.1.2", "2.onnxruntime.1.2"]
    assert CompareSnapshot.model_validate({k: data[k] for k in CompareSnapshot.model_fields})
