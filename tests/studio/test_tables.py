"""Every table a page shows reads as written for people: no "None" cell, no snake_case header.

Streamlit draws a missing value as the word "None", so a builder must write "—" (or a word)
itself; a header is what the page shows, so it must not be a field name. Each builder below is
fed the rows a real page gets, with the gaps they really have (a failed variant has no
speedup, a queued job no finish time, a new op family no ratio).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

import pandas as pd
import pytest

from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.simulate import simulate, simulate_band
from optistudio.core.diagnose.operator_profile import OperatorProfile
from optistudio.core.diagnose.profile_compare import ProfileComparison
from optistudio.core.llm.serving import DecoderBenchReport
from optistudio.core.measure.stages import Breakdown
from optistudio.core.model.info import TensorSpec
from optistudio.core.passes.base import passes
from optistudio.core.report.symbolic_dims import SymbolicDims
from optistudio.services.jobkinds import OPTIMIZE
from optistudio.studio import (
    batching_verify,
    compare_services,
    diagnostics_services,
    optimize_services,
)
from optistudio.studio.decoder_rows import bench_rows
from optistudio.studio.formatting import EMPTY, readable_frame
from optistudio.studio.input_profile_services import cut_shapes, symbolic_legend, tensor_table
from optistudio.studio.job_view import JobView
from optistudio.studio.results_services import display_table, side_by_side
from optistudio.studio.views.jobs import jobs_table

SNAKE_CASE = re.compile(r"^[a-z0-9]+(_[a-z0-9]+)+$")
LONG_DIM = "floor((height + -1) / 32) + floor((width + -1) / 32) * 2 + 1" * 3


def optimize_result(task: dict[str, object] | None = None) -> object:
    """A run with a made variant (task figures, no top-1) and a failed one (no figures)."""
    recipe = {"name": "int8_static", "label": "INT8 static (MinMax)", "steps": []}
    accuracy = {"samples": 8, "data": "builtin", "max_abs_error": 0.02, "mean_abs_error": 0.001}
    accuracy |= {"mean_cosine": 0.999, "min_cosine": 0.99, "top1_agreement": None}
    accuracy |= {"nan_or_inf": False, "task_metrics": {"f1": 0.97}, "per_output_max_abs_error": {}}
    return OPTIMIZE.parse_result(
        {
            "spec": {"recipes": ["auto"]},
            "data": "builtin",
            "variants": [
                {"recipe": recipe, "precision": "int8", "ratio": 0.5, "ratio_low": 0.45}
                | {"ratio_high": 0.55, "verdict": "faster", "speedup": 2.0, "within_budget": True}
                | {"model_id": 7, "accuracy": accuracy},
                {"recipe": recipe | {"name": "fp16", "label": "FP16"}, "precision": "fp16"}
                | {"status": "failed", "error": {"code": "pass_failed", "message": "no"}},
            ],
            "chosen": "int8_static",
        }
        | (task or {})
    )


def decoder_result() -> object:
    """A decoder's run: a made INT4 variant (decoding figures, perplexity) and a failed one."""
    interval = {"ratio": 0.5, "low": 0.45, "high": 0.55, "confidence": 0.95, "pairs": 8}
    interval |= {"verdict": "faster"}
    decoding = {"rank_by": "tokens_per_s", "prompt_tokens": 16, "steps": 8, "pairs": 8}
    decoding |= {"tokens_per_s": 200.0, "original_tokens_per_s": 100.0}
    decoding |= {"ms_per_token_p50": 5.0, "ms_per_token_p99": 6.0, "original_ms_per_token_p50": 10}
    decoding |= {"ttft_ms": 3.0, "original_ttft_ms": 5.0, "decode": interval, "ttft": interval}
    decoding |= {"size_bytes": 300_000, "original_size_bytes": 1_000_000}
    accuracy = {"samples": 4, "data": "user", "max_abs_error": 0.2, "mean_abs_error": 0.01}
    accuracy |= {"mean_cosine": 0.99, "min_cosine": 0.98, "top1_agreement": 0.95}
    accuracy |= {"nan_or_inf": False, "per_output_max_abs_error": {}}
    accuracy |= {"task_metrics": {"perplexity": 10.3, "reference_perplexity": 10.0}}
    accuracy["task_metrics"] |= {"perplexity_increase": 0.03}  # type: ignore[operator]
    recipe = {"name": "int4_weight_only", "label": "INT4 weight-only", "steps": []}
    return OPTIMIZE.parse_result(
        {
            "spec": {"recipes": ["auto"]},
            "data": "text",
            "task": "text_generation",
            "task_budget": {"perplexity_increase": 0.05},
            "variants": [
                {"recipe": recipe, "precision": "int4", "ratio": 0.5, "ratio_low": 0.45}
                | {"ratio_high": 0.55, "verdict": "faster", "speedup": 2.0, "within_budget": True}
                | {"model_id": 8, "accuracy": accuracy, "decoding": decoding},
                {"recipe": recipe | {"name": "int8_weight_only", "label": "INT8 weight-only"}}
                | {"precision": "int8", "status": "failed"}
                | {"error": {"code": "pass_failed", "message": "no"}},
            ],
            "chosen": "int4_weight_only",
        }
    )


def decoder_variants() -> pd.DataFrame:
    result = decoder_result()
    rows = optimize_services.variant_rows(result)  # type: ignore[arg-type]
    return optimize_services.variants_table(rows, result.task, result.task_budget)  # type: ignore[attr-defined]


def decoder_bench() -> list[pd.DataFrame]:
    prefill = [{"prompt_tokens": 32, "ttft_ms": 2.5, "repeats": 5}]
    decode = [{"batch": 1, "prompt_tokens": 16, "steps": 64, "tokens_per_s": 300.0}]
    decode[0] |= {"ms_per_token_p50": 3.3, "ms_per_token_p99": 4.0}
    report = DecoderBenchReport.model_validate(
        {"backend": "onnxruntime", "size_bytes": 10, "prefill": prefill, "decode": decode}
        | {"environment": {}}
    )
    return [readable_frame(rows) for rows in bench_rows(report)]


DETECTOR = {"task": "detection_boxes", "task_reason": "boxes", "task_budget": {"f1": 0.95}}


def variants(task: dict[str, object] | None) -> pd.DataFrame:
    result = optimize_result(task)
    rows = optimize_services.variant_rows(result)  # type: ignore[arg-type]
    return optimize_services.variants_table(rows, result.task, result.task_budget)  # type: ignore[attr-defined]


def measurements() -> pd.DataFrame:
    """Two jobs of the Results page, one of which measured no p95 (NaN in the wide frame)."""
    wide = pd.DataFrame(
        [
            {"job_id": 2, "model_name": "cnn", "backend": "openvino", "batch_size": 1}
            | {"threads": 2, "p50_ms": 1.0, "p10_ms": 0.9, "p90_ms": 1.1, "p95_ms": 1.2}
            | {"p99_ms": 1.3, "throughput": 1000.0, "stable": 1.0, "device": "cpu"}
            | {"precision": "fp32", "outputs": "reference"},
            {"job_id": 1, "model_name": "cnn", "backend": "onnxruntime", "batch_size": 1}
            | {"threads": 2, "p50_ms": 2.0, "p10_ms": 1.9, "p90_ms": 2.2, "p95_ms": math.nan}
            | {"p99_ms": 2.5, "throughput": 500.0, "stable": 0.0, "device": "cpu"}
            | {"precision": "fp32", "outputs": "not checked"},
        ]
    )
    return readable_frame(display_table(wide))


def profile() -> OperatorProfile:
    node = {"node": "conv1_kernel_time", "graph_node": "", "op_type": "Conv", "family": "Conv"}
    node |= {"precision": "", "time_us": 120.0, "share": 0.8, "calls": 30}
    op_type = {"op_type": "Conv", "time_us": 120.0, "share": 0.8, "nodes": 1, "precisions": {}}
    return OperatorProfile.model_validate(
        {"model": "cnn.onnx", "sha256": "0" * 64, "inputs": [], "outputs": [], "backend": "ort"}
        | {"batch_size": 1, "runs": 30, "quantized": False, "node_total_us": 150.0}
        | {"profiled_ms": 0.2, "plain_ms": 0.15, "overhead": 1.3}
        | {"nodes": [node], "op_types": [op_type]}
    )


def comparison() -> ProfileComparison:
    new = {"family": "QLinearConv", "a_us": 0.0, "b_us": 50.0, "ratio": None, "change": "new"}
    return ProfileComparison.model_validate(
        {"a_model": "cnn", "b_model": "cnn int8", "a_ms": 0.2, "b_ms": 0.1, "ratio": 0.5}
        | {"families": [new | {"a_nodes": 0, "b_nodes": 2}], "expected_precision": "int8"}
        | {"not_in_precision": []}
    )


def layer_errors() -> pd.DataFrame:
    row = {"rank": 1, "node": "", "op_type": "Conv", "graph_index": 3, "fed_by": []}
    row |= {"quantized_node": "", "sqnr_db": 30.0, "cosine": 0.999, "noise_added": 0.001}
    return diagnostics_services.layer_error_frame([row])


def stages() -> pd.DataFrame:
    stage = {"stage": "inference", "ms": 1.5, "share": 1.0, "detail": ""}
    breakdown = Breakdown.model_validate({"batch_size": 1, "stages": [stage]})
    wait = diagnostics_services.QueueWait(job=4, kind="Batching verification", queue_ms=0.4)
    return diagnostics_services.breakdown_frame(breakdown, wait)


def jobs() -> pd.DataFrame:
    row = JobView(
        id=3, kind="Benchmark", status="queued", model="cnn", created_at=datetime.now(UTC)
    )
    done = replace(row, id=2, status="succeeded", finished_at=datetime.now(UTC))
    return jobs_table([row, done, replace(done, id=1, status="failed", error_code="internal")])


def card_shapes() -> list[pd.DataFrame]:
    dims = SymbolicDims()
    inputs = [TensorSpec(name="image", dtype="float32", shape=["batch", 3, None, None])]
    outputs = [
        TensorSpec(name="boxes", dtype="float32", shape=["batch", LONG_DIM, 6]),
        TensorSpec(name="features", dtype="float32", shape=["batch", *[1024] * 8]),
    ]
    return [tensor_table(inputs, dims), tensor_table(outputs, dims), symbolic_legend(dims)] + [
        cut_shapes(outputs, dims)
    ]


def comparisons() -> pd.DataFrame:
    row = {"job": 5, "A": "#1 cnn", "B": "#2 cnn int8", "ratio": 0.52, "low": 0.5, "high": 0.55}
    row |= {"verdict": "faster", "pairs": 400, "batch": 1, "contended": True}
    return compare_services.comparison_table([row])


def verify() -> pd.DataFrame:
    """A Verify beside its prediction: the mean batch size and queue wait have no band."""
    profile = LatencyProfile(batch_sizes=[1, 2, 4], mean_ms=[2.0, 2.5, 3.5])
    settings = BatchingSettings(max_batch_size=4, timeout_ms=1)
    predicted = simulate(profile, settings, rate=200, requests=500)
    band = simulate_band(profile, settings, rate=200, seconds=1, draws=4)
    measured = predicted.model_copy(update={"p99_ms": band.p99_high_ms * 2})
    return batching_verify.verify_table(batching_verify.comparison_frame(predicted, measured, band))


def compare_snapshot_table() -> pd.DataFrame:
    """The Compare page's table: an optimize run's variant (p50 only: its percentiles and
    throughput were never measured) beside a benchmark, against it as the baseline."""
    from optistudio.core.report.snapshot import CompareSnapshot, ResultRow
    from optistudio.studio.share_view import table_frame

    common = {"model_id": 1, "model": "cnn", "backend": "onnxruntime", "batch_size": 1}
    common |= {"threads": 0, "environment_id": None}
    variant = ResultRow(
        key="v3.0", job_id=3, parent_id=1, source="optimize run", noise=0.02, **common,
        metrics={"p50_ms": 35.95, "speedup_vs_original": 1.15, "cosine_error": 2e-14},
    )  # fmt: skip
    bench = ResultRow(
        key="4.onnxruntime.1.0", job_id=4, parent_id=None, **common,
        metrics={"p50_ms": 41.35, "p99_ms": 50.0, "throughput": 24.2, "cosine_error": 0.0},
    )  # fmt: skip
    snapshot = CompareSnapshot(rows=[variant, bench], baseline=bench.key, budget_ms=45.0)
    return table_frame(snapshot)[1]


BUILDERS: dict[str, Callable[[], pd.DataFrame | list[pd.DataFrame]]] = {
    "compare stored results": compare_snapshot_table,
    "optimize variants": lambda: variants(None),
    "optimize variants of a detector": lambda: variants(DETECTOR),
    "optimize variants of a decoder": decoder_variants,
    "results decoder benchmark": decoder_bench,
    "optimize disagreements": lambda: readable_frame(
        [{"sample": 3, "original": "HELLO", "variant": "HELL0", "label": "", "how far": 0.2}]
    ),
    "optimize tasks": lambda: readable_frame(optimize_services.task_table()),
    "optimize pass settings": lambda: [
        optimize_services.pass_settings_table(p)
        for p in passes
        if p.config_class().model_fields  # one without settings says so, not as a table
    ],
    "results measurements": measurements,
    "results side by side": lambda: readable_frame(
        side_by_side(
            pd.DataFrame(
                [
                    {"job_id": 1, "backend": "onnxruntime", "device": "cpu", "precision": "fp32"}
                    | {"batch_size": 1, "p50_ms": 1.0, "p99_ms": math.nan, "throughput": 9.0}
                    | {"outputs": "reference"}
                ]
            )
        )
    ),
    "compare head-to-head": comparisons,
    "batching verify": verify,
    "diagnostics top nodes": lambda: diagnostics_services.top_nodes_frame(profile()),
    "diagnostics op families": lambda: diagnostics_services.comparison_frame(comparison()),
    "diagnostics layer errors": layer_errors,
    "diagnostics stages": stages,
    "jobs": jobs,
    "model card shapes": card_shapes,
}


@pytest.mark.parametrize("build", BUILDERS.values(), ids=BUILDERS.keys())
def test_no_cell_reads_none_and_no_header_is_a_field_name(
    build: Callable[[], pd.DataFrame | list[pd.DataFrame]],
) -> None:
    built = build()
    tables = built if isinstance(built, list) else [built]

    assert tables and all(not table.empty for table in tables)
    for table in tables:
        cells = [value for column in table.columns for value in table[column].tolist()]
        assert not [c for c in cells if c is None or c is pd.NaT or str(c) in ("None", "nan")]
        assert not [h for h in table.columns if SNAKE_CASE.match(str(h))]


def test_a_detectors_variants_have_its_metrics_and_no_top1_columns() -> None:
    detector, untasked = variants(DETECTOR), variants(None)

    assert "top-1 drop" not in detector and "top-1 drop" in untasked
    assert "Box F1" in detector and "f1" not in detector  # a task metric reads by its label
    assert detector.iloc[0]["Box F1"] == "0.97"
    failed = detector.iloc[1]
    assert failed["speedup"] == failed["mean cosine"] == failed["speedup CI"] == EMPTY
    assert detector.iloc[0]["speedup"] == "2.00x" and detector.iloc[0]["model id"] == "#7"


def test_a_queued_jobs_finish_reads_not_yet() -> None:
    table = jobs()

    assert list(table["finished"])[0] == "not yet"
    assert list(table["code"]) == [EMPTY, EMPTY, "internal"]


@pytest.mark.parametrize(
    ("metric", "name"),
    [("p50_ms", "p50"), ("string_agreement", "String agreement"), ("made_up_x", "made up x")],
    ids=["latency", "task-metric", "unknown"],
)
def test_a_delta_column_is_named_by_its_metrics_label(metric: str, name: str) -> None:
    from optistudio.studio.share_view import delta_name

    assert delta_name(metric).lower() == name.lower()


def test_a_decoders_variants_show_decoding_perplexity_and_size_not_p50_and_cosine() -> None:
    table = decoder_variants()

    made, failed = table.iloc[0], table.iloc[1]
    assert made["tokens/s"] == "200.0" and made["FP32 tokens/s"] == "100.0"
    assert made["TTFT (ms)"] == "3.00" and made["perplexity increase"] == "+3.00%"
    assert made["size vs FP32"] == "0.30x" and made["perplexity"] == "10.300"
    assert failed["tokens/s"] == failed["perplexity"] == EMPTY
    assert not {"mean cosine", "variant p50 (ms)", "Perplexity increase"} & set(table.columns)
