"""Compare decides only on differences that matter: accuracy within its resolution and latency
within the measurement's noise are ties, which crown nobody; the faster of tied results wins.

The real case: the sweet spot picked a 41.35 ms variant over an equally accurate 35.95 ms one
on a 1e-14 difference in error."""

from __future__ import annotations

import pytest

from optistudio.core.report.html import report_csv, report_html
from optistudio.core.report.pareto import pareto_front, sweet_spot
from optistudio.core.report.snapshot import (
    NOT_MEASURED,
    CompareSnapshot,
    ResultRow,
    best_rows,
    missing_notes,
    table_records,
)
from optistudio.core.report.ties import accuracy_tie, measured_tie, tie

ROUNDING = [
    {"p50_ms": 41.35, "cosine_error": 1.0e-14},
    {"p50_ms": 35.95, "cosine_error": 2.0e-14},
]


def row(key: str, metrics: dict[str, float | None], **extra: object) -> ResultRow:
    return ResultRow(
        key=key,
        job_id=int(key.split(".")[0].lstrip("v")),
        model_id=1,
        model="m",
        parent_id=1,
        backend="onnxruntime",
        batch_size=1,
        threads=0,
        environment_id=None,
        metrics=metrics,
        **extra,  # type: ignore[arg-type]
    )


def test_the_sweet_spot_takes_the_faster_of_two_equally_accurate_variants() -> None:
    picked = sweet_spot(ROUNDING, latency="p50_ms", budget=50, quality="cosine_error")

    assert picked == 1  # 35.95 ms: a 1e-14 difference in error is float rounding


def test_a_real_difference_in_accuracy_still_decides_the_sweet_spot() -> None:
    points = [{"p50_ms": 41.35, "cosine_error": 1e-4}, {"p50_ms": 35.95, "cosine_error": 3e-3}]

    assert sweet_spot(points, latency="p50_ms", budget=50, quality="cosine_error") == 0


def test_a_point_more_accurate_by_rounding_alone_is_off_the_frontier() -> None:
    assert pareto_front(ROUNDING, ["p50_ms", "cosine_error"]) == [1]


def test_a_point_faster_within_the_noise_does_not_push_a_more_accurate_one_off() -> None:
    points = [{"p50_ms": 10.0, "cosine_error": 1e-3}, {"p50_ms": 10.3, "cosine_error": 1e-5}]

    assert pareto_front(points, ["p50_ms", "cosine_error"], [0.05, 0.05]) == [1]
    assert pareto_front(points, ["p50_ms", "cosine_error"], [0.001, 0.001]) == [0, 1]


@pytest.mark.parametrize(
    ("metric", "a", "b", "tied"),
    [
        ("cosine_error", 1e-14, 2e-14, True),
        ("mean_cosine", 0.99991, 0.99994, True),  # the same at the 4 digits shown
        ("cosine_error", 1e-3, 2e-3, False),
        ("p50_ms", 35.95, 41.35, False),
        ("p50_ms", 10.0, 10.1, True),  # 1 %: inside the 2 % floor
    ],
    ids=["rounding", "shown-alike", "real-error", "real-latency", "latency-noise"],
)
def test_what_counts_as_a_tie(metric: str, a: float, b: float, tied: bool) -> None:
    assert tie(metric, a, b) is tied


def test_noise_widens_a_latency_tie_and_never_an_accuracy_one() -> None:
    assert not measured_tie(10.0, 11.0) and measured_tie(10.0, 11.0, noise=0.1)
    assert not accuracy_tie(0.1, 0.2)


def test_best_marks_every_tied_row_and_none_when_all_tie() -> None:
    snapshot = CompareSnapshot(
        rows=[
            row("1.onnxruntime.1.0", {"p50_ms": 41.35, "cosine_error": 1e-14}),
            row("2.onnxruntime.1.0", {"p50_ms": 35.95, "cosine_error": 2e-14}),
            row("3.onnxruntime.1.0", {"p50_ms": 36.10, "cosine_error": 2e-2}),
        ]
    )

    assert best_rows(snapshot, "p50_ms") == [1, 2]  # 36.10 is within 2 % of 35.95
    assert best_rows(snapshot, "cosine_error") == [0, 1]
    alike = CompareSnapshot(rows=snapshot.rows[:2])
    assert best_rows(alike, "cosine_error") == []  # a tie crowns nobody


def optimize_and_benchmark(*, contended: bool) -> CompareSnapshot:
    variant = row(
        "v7.0",
        {"p50_ms": 35.95, "speedup_vs_original": 1.2, "cosine_error": 2e-14},
        source="optimize run",
        noise=0.03,
    )
    bench = row(
        "8.onnxruntime.1.0",
        {"p50_ms": 41.35, "p99_ms": 50.0, "throughput": 24.0, "cosine_error": 1e-14}
        | {"contended": 1.0 if contended else 0.0, "window_spread": 0.01},
    )
    return CompareSnapshot(rows=[variant, bench], baseline="8.onnxruntime.1.0", budget_ms=45)


def test_a_missing_percentile_of_an_optimize_run_says_why_in_every_export() -> None:
    snapshot = optimize_and_benchmark(contended=False)

    records = table_records(snapshot)

    assert records[0]["p99_ms"] is None and records[0]["p99_ms missing"] == NOT_MEASURED
    assert any(NOT_MEASURED in note and "p99 latency" in note for note in missing_notes(snapshot))
    page = report_html(snapshot)
    assert f"title='{NOT_MEASURED}'>—</td>" in page and "None" not in page.split("<script")[0]
    assert NOT_MEASURED in report_csv(snapshot)
    assert snapshot.rows[snapshot.sweet_spot()].key == "v7.0"  # type: ignore[index]


def test_deltas_against_a_contended_baseline_are_flagged() -> None:
    quiet, contended = (optimize_and_benchmark(contended=c) for c in (False, True))

    assert quiet.contended_baseline() is None
    assert "CONTENDED" in (contended.contended_baseline() or "")
    assert table_records(contended)[0]["baseline contended"]
    assert "Deltas flagged" in report_html(contended)
