"""The Results page's logic without Streamlit: the results frame, its table and verdicts."""

from __future__ import annotations

import pandas as pd
import pytest

from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.db.models import JobStatus
from optistudio.db.queries import MeasurementRow, claim_job, finish_job, replace_measurements
from optistudio.db.session import transaction
from optistudio.services.catalog import add_model_file
from optistudio.studio.jobs_services import submit_benchmark
from optistudio.studio.results_services import (
    comparison_rows,
    display_table,
    results_frame,
    verdict,
)


@pytest.fixture
def model_id(db_factory, app_settings, tiny_model) -> int:
    return add_model_file(db_factory, app_settings, tiny_model, name="tiny").model_id


def finished_job_with(db_factory, model_id: int, metrics: dict[str, float]) -> int:
    sent = []
    job_id = submit_benchmark(
        db_factory,
        model_id=model_id,
        spec=BenchmarkSpec(),
        send=lambda name, args: sent.append((name, args)) or "task-1",
    )
    assert sent == [("optistudio.benchmark", [job_id])]
    with transaction(db_factory) as s:
        claim_job(s, job_id=job_id, worker="w", task_id="task-1")
        rows = [
            MeasurementRow("onnxruntime", 1, 2, name, value, "") for name, value in metrics.items()
        ]
        replace_measurements(s, job_id=job_id, rows=rows)
        finish_job(s, job_id=job_id, status=JobStatus.succeeded, message="ok")
    return job_id


def test_results_table_shows_spread_and_verdicts(db_factory, model_id) -> None:
    finished_job_with(
        db_factory,
        model_id,
        {
            "p10_ms": 1.0,
            "p50_ms": 2.0,
            "p90_ms": 4.0,
            "p99_ms": 9.0,
            "throughput": 500.0,
            "samples": 40,
            "stable": 0.0,
            "contended": 1.0,
            "other_cores": 1.3,
        },
    )

    table = display_table(results_frame(db_factory, model_id=model_id))

    assert table.loc[0, "p50 (ms)"] == "2.000 ± 1.500"
    assert table.loc[0, "p99 (ms)"] == 9.0
    assert table.loc[0, "verdict"] == "unstable, contended (1.3 cores busy elsewhere)"
    columns = list(table.columns)  # the flags in view, not past the figures off-screen
    assert columns.index("verdict") == columns.index("threads") + 1 < columns.index("p50 (ms)")
    assert table.loc[0, "runs"] == 40


def test_empty_results_are_an_empty_frame(db_factory) -> None:
    assert results_frame(db_factory).empty


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({"stable": 1.0, "contended": 0.0}, "stable"),
        ({"stable": 0.0}, "unstable"),
        (
            {"stable": 1.0, "contended": 1.0, "other_cores": 0.5},
            "stable, contended (0.5 cores busy elsewhere)",
        ),
    ],
    ids=["quiet-stable", "unstable", "contended"],
)
def test_verdict(row, expected) -> None:
    assert verdict(pd.Series(row)) == expected


@pytest.mark.parametrize(
    ("precision", "noise", "said"),
    [
        ("bf16", 0.5, "DISAGREE (the BF16 rule: worst-sample SNR >= 15 dB on every output): y:"),
        ("fp32", 1e-7, "agree within the FP32 rule: worst-sample SNR >= 45 dB on every output ("),
    ],
    ids=["bf16-disagrees", "fp32-agrees"],
)
def test_the_outputs_verdict_names_the_rule_that_judged_it(
    db_factory, model_id, precision: str, noise: float, said: str
) -> None:
    """The page words the verdict as bench prints it (`OutputCheck.verdict`), rule and all: it
    read 'DISAGREE: <problems>' with no rule named."""
    import numpy as np

    from optistudio.core.numerics.crosscheck import check_outputs
    from optistudio.db.queries import set_job_result
    from optistudio.services.jobresults import BenchmarkJobResult, BenchmarkTarget

    reference = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    check = check_outputs(["y"], [reference], [reference + noise], precision=precision)
    job_id = finished_job_with(db_factory, model_id, {"p50_ms": 2.0, "p99_ms": 3.0})
    target = BenchmarkTarget(backend="openvino", device="cpu", precision=precision)
    result = BenchmarkJobResult(target=target, output_check=check)
    with transaction(db_factory) as s:
        set_job_result(s, job_id=job_id, result=result.model_dump(mode="json"))

    wide = results_frame(db_factory, model_id=model_id)

    assert wide.loc[0, "outputs"].startswith(said)
    assert wide.loc[0, "outputs"] == check.verdict()  # one wording, bench's


def finished_comparison(db_factory, model_id: int, spec: dict[str, object], threads: int) -> int:
    """A succeeded A/B comparison of `model_id` against itself, stored as the worker stores it."""
    from optistudio.db.models import JobKind
    from optistudio.db.queries import create_job, set_job_result
    from optistudio.services.jobresults import CompareJobResult

    summary = {"p50_ms": 2.0}
    result = CompareJobResult(
        ratio=0.9, low=0.85, high=0.95, confidence=0.95, verdict="faster", pairs=60,
        duration_s=1.0, a_p50_ms=2.0, b_p50_ms=1.8, a_summary=summary, b_summary=summary,
        batch_size=1, threads=threads, environment={}, sentence="B is faster",
        candidate_model_id=model_id, candidate_name="tiny",
    )  # fmt: skip
    with transaction(db_factory) as s:
        job_id = create_job(s, kind=JobKind.compare, spec=spec, model_id=model_id).id
        set_job_result(s, job_id=job_id, result=result.model_dump(mode="json"))
        finish_job(s, job_id=job_id, status=JobStatus.succeeded)
    return job_id


def test_a_comparison_is_named_by_how_both_sides_ran(db_factory, model_id) -> None:
    """Two A/B runs of one pair on other settings read apart on the Compare page's chart."""
    from optistudio.studio.charts import ratio_intervals

    finished_comparison(db_factory, model_id, {"candidate_model_id": model_id}, threads=0)
    mixed = {"candidate_backend": "openvino", "candidate_precision": "bf16", "threads": 2}
    finished_comparison(db_factory, model_id, mixed | {"candidate_model_id": model_id}, 2)

    newest, oldest = comparison_rows(db_factory)
    labels = list(ratio_intervals([newest, oldest]).data[0].y)

    assert oldest["runs"] == "onnxruntime fp32 · batch 1 · default threads"
    assert newest["runs"] == "A onnxruntime fp32, B openvino bf16 · batch 1 · 2 threads"
    assert labels[1].endswith("(onnxruntime fp32 · batch 1 · default threads)")
    assert len(set(labels)) == 2
