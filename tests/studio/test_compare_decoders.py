"""Decoders on Compare in their own terms: tokens/s, TTFT, time per token, perplexity, size."""

from __future__ import annotations

import html
from typing import Any

import pytest
from compare_seed import ENV

from optistudio.core.llm.serving import DecoderBenchReport
from optistudio.core.llm.timing import DecodeTiming, PrefillTiming
from optistudio.core.measure.compare import RatioInterval
from optistudio.core.optimize.decoder_timing import DecoderFigures
from optistudio.core.report.html import report_html
from optistudio.core.report.snapshot import DECODER_METRICS, decoder_note, table_metrics
from optistudio.db.models import JobKind, JobStatus
from optistudio.db.queries import create_job, finish_job, get_or_create_environment, set_job_result
from optistudio.db.session import transaction
from optistudio.services.catalog import add_model_file
from optistudio.services.jobkinds import BENCHMARK
from optistudio.services.jobresults import BenchmarkJobResult, BenchmarkTarget
from optistudio.studio.compare_services import (
    build_snapshot,
    fit_axes,
    read_selection,
    result_options,
)

RECIPE = {"name": "int4_weight_only", "label": "INT4 weight-only", "steps": [], "precision": None}


def _finished(factory: Any, kind: JobKind, model_id: int, result: dict[str, Any]) -> int:
    with transaction(factory) as s:
        job = create_job(s, kind=kind, spec={}, model_id=model_id).id
        set_job_result(s, job_id=job, result=result)
        env = get_or_create_environment(s, data=ENV).id
        finish_job(s, job_id=job, status=JobStatus.succeeded, environment_id=env)
    return job


def _decoder_bench(factory: Any, model_id: int) -> int:
    report = DecoderBenchReport(
        backend="onnxruntime",
        size_bytes=40_000_000,
        prefill=[
            PrefillTiming(prompt_tokens=128, ttft_ms=30.0, repeats=3),
            PrefillTiming(prompt_tokens=32, ttft_ms=9.0, repeats=3),
        ],
        decode=[
            DecodeTiming(
                batch=1,
                prompt_tokens=16,
                steps=64,
                tokens_per_s=200.0,
                ms_per_token_p50=5.0,
                ms_per_token_p99=6.5,
            ),
            DecodeTiming(
                batch=4,
                prompt_tokens=16,
                steps=64,
                tokens_per_s=560.0,
                ms_per_token_p50=7.1,
                ms_per_token_p99=9.0,
            ),
        ],  # fmt: skip
        environment={"threads": 2},
        peak_rss_mb=310.0,
        model_rss_mb=80.0,
    )
    target = BenchmarkTarget(backend="onnxruntime", device="cpu", precision="fp32")
    result = BenchmarkJobResult(target=target, decoder=report)
    return _finished(factory, JobKind.benchmark, model_id, BENCHMARK.dump_result(result))


def _interval(ratio: float) -> RatioInterval:
    verdict = "faster" if ratio < 1 else "slower"
    return RatioInterval(
        ratio=ratio, low=ratio * 0.95, high=ratio * 1.05, confidence=0.95, pairs=20,
        verdict=verdict,
    )  # fmt: skip


def _decoder_optimize(factory: Any, model_id: int, variant_id: int) -> int:
    figures = DecoderFigures(
        rank_by="tokens_per_s", prompt_tokens=16, steps=32, pairs=20,
        tokens_per_s=400.0, original_tokens_per_s=200.0,
        ms_per_token_p50=2.5, ms_per_token_p99=3.0, original_ms_per_token_p50=5.0,
        ttft_ms=6.0, original_ttft_ms=9.0, decode=_interval(0.5), ttft=_interval(0.67),
        size_bytes=12_000_000, original_size_bytes=40_000_000,
    )  # fmt: skip
    accuracy = {"samples": 4, "data": "builtin", "max_abs_error": 0.3, "mean_abs_error": 0.05}
    accuracy |= {"mean_cosine": 0.99, "min_cosine": 0.97, "per_output_max_abs_error": {}}
    accuracy |= {"nan_or_inf": False, "task": "text_generation"}
    accuracy |= {
        "task_metrics": {
            "perplexity": 21.0,
            "reference_perplexity": 20.0,
            "perplexity_increase": 0.05,
        }
    }
    made = {"recipe": RECIPE, "precision": "int4", "backend": "onnxruntime", "model_id": variant_id}
    made |= {"ratio": 0.5, "ratio_low": 0.475, "ratio_high": 0.525, "verdict": "faster"}
    made |= {"speedup": 2.0, "original_p50_ms": 5.0, "variant_p50_ms": 2.5}
    made |= {"accuracy": accuracy, "within_budget": True, "decoding": figures.model_dump()}
    result = {"spec": {"recipes": ["auto"]}, "data": "builtin", "chosen": RECIPE["name"]}
    result |= {"variants": [made]}
    return _finished(factory, JobKind.optimize, model_id, result)


@pytest.fixture
def stored(db_factory, app_settings, make_model) -> dict[str, int]:  # type: ignore[no-untyped-def]
    original = add_model_file(db_factory, app_settings, make_model("llm.onnx"), name="llm")
    variant = add_model_file(
        db_factory, app_settings, make_model("q.onnx", features=12), name="llm int4",
        parent_id=original.model_id, precision="int4",
    )  # fmt: skip
    return {
        "bench": _decoder_bench(db_factory, original.model_id),
        "optimize": _decoder_optimize(db_factory, original.model_id, variant.model_id),
    }


def test_a_decoder_benchmark_is_offered_per_batch_and_reads_as_decoding(
    db_factory, stored: dict[str, int]
) -> None:
    bench = stored["bench"]
    options = result_options(db_factory)
    keys = [f"{bench}.onnxruntime.1.2", f"{bench}.onnxruntime.4.2"]
    assert set(keys) <= set(options)
    assert "[decoder]" in options[keys[1]] and "decoding at batch 4" in options[keys[1]]

    snapshot, missing = build_snapshot(db_factory, read_selection({"results": ",".join(keys)}))

    assert not missing
    one, four = snapshot.rows
    assert (one.batch_size, four.batch_size) == (1, 4)
    assert four.metrics["tokens_per_s"] == 560.0 and four.metrics["throughput"] == 560.0
    assert four.metrics["p50_ms"] == four.metrics["ms_per_token_p50"] == 7.1
    assert one.metrics["ttft_ms"] == 9.0  # the shortest prompt's
    assert one.metrics["size_mb"] == pytest.approx(40.0) and one.metrics["peak_rss_mb"] == 310.0
    assert "32-token prompt" in one.accuracy_note and "judges no accuracy" in one.accuracy_note


def test_decoder_variants_carry_decoding_and_perplexity_beside_their_original(
    db_factory, stored: dict[str, int]
) -> None:
    job = stored["optimize"]
    selection = read_selection({"results": f"v{job}.o,v{job}.0"})
    snapshot, _ = build_snapshot(db_factory, selection)

    original, variant = snapshot.rows
    assert (original.metrics["tokens_per_s"], variant.metrics["tokens_per_s"]) == (200.0, 400.0)
    assert (original.metrics["ttft_ms"], variant.metrics["ttft_ms"]) == (9.0, 6.0)
    assert variant.metrics["perplexity_increase"] == 0.05
    assert (original.metrics["perplexity"], variant.metrics["perplexity"]) == (20.0, 21.0)
    assert variant.metrics["size_vs_fp32"] == pytest.approx(0.3)
    assert original.metrics["size_vs_fp32"] == 1.0
    columns = table_metrics(snapshot)
    assert columns[: len(DECODER_METRICS)] == list(DECODER_METRICS)  # a decoder's own first
    note = decoder_note(snapshot)
    assert note is not None and "tokens/s" in note
    assert html.escape(note) in report_html(snapshot)


def test_an_all_decoder_view_plots_perplexity_against_time_per_token_unless_the_link_says(
    db_factory, stored: dict[str, int]
) -> None:
    job = stored["optimize"]
    keys = f"v{job}.o,v{job}.0"
    selection = read_selection({"results": keys})
    snapshot, _ = build_snapshot(db_factory, selection)
    assert not fit_axes(snapshot, selection)
    assert (snapshot.latency_metric, snapshot.quality_metric) == (
        "ms_per_token_p50",
        "perplexity_increase",
    )

    chosen = read_selection({"results": keys, "latency": "p50_ms", "quality": "cosine_error"})
    snapshot, _ = build_snapshot(db_factory, chosen)
    fit_axes(snapshot, chosen)
    assert (snapshot.latency_metric, snapshot.quality_metric) == ("p50_ms", "cosine_error")


def test_a_mixed_view_keeps_the_default_axes(db_factory, stored, make_model, app_settings) -> None:  # type: ignore[no-untyped-def]
    from compare_seed import benchmark

    other = add_model_file(db_factory, app_settings, make_model("cnn.onnx"), name="cnn").model_id
    bench = benchmark(db_factory, other, 1, 2.0, ENV)
    job = stored["optimize"]
    selection = read_selection({"results": f"v{job}.0,{bench}.onnxruntime.1.2"})
    snapshot, missing = build_snapshot(db_factory, selection)
    assert not missing
    fit_axes(snapshot, selection)
    assert (snapshot.latency_metric, snapshot.quality_metric) == ("p50_ms", "cosine_error")
