"""A decoder's figures as the pages show them: tokens/s, TTFT, perplexity and size.

A decoder with a KV cache is timed by its decoding and judged by how it predicts a text
(optistudio.core.optimize.decoder_run), so where another model's variant shows p50 and cosine,
a decoder's shows tokens/s and TTFT (each beside the FP32 original's, timed in the same run),
perplexity and its increase, and its size on disk against the FP32 file. A benchmark of a
decoder (optistudio.core.llm.serving) reads as TTFT per prompt length and tokens/s per batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from optistudio.core.llm.serving import DecoderBenchReport
from optistudio.core.optimize.variant import VariantResult
from optistudio.services.jobresults import BenchmarkJobResult
from optistudio.studio.job_view import JobView

MB = 1e6
DECODER_NUMBERS = {
    "tokens/s": "{:.1f}",
    "FP32 tokens/s": "{:.1f}",
    "TTFT (ms)": "{:.2f}",
    "FP32 TTFT (ms)": "{:.2f}",
    "perplexity": "{:.3f}",
    "FP32 perplexity": "{:.3f}",
    "perplexity increase": "{:+.2%}",
    "size (MB)": "{:.2f}",
    "size vs FP32": "{:.2f}x",
}
SHOWN_METRICS = ("perplexity", "perplexity_increase", "reference_perplexity")
"""Task metrics a decoder's row shows under its own headers (not again by their labels)."""
RESULTS_COLUMNS = ("tokens/s", "TTFT (ms)", "perplexity increase", "size vs FP32")
"""The decoder figures the Results page's short variant table keeps."""


@dataclass(frozen=True)
class DecoderBench:
    """A decoder's finished benchmark job as the pages show it: the job (with its result),
    what it was measured on, and its table rows (`bench_rows`: TTFT per prompt length,
    tokens/s per batch size; free-form, one column per figure)."""

    job: JobView[BenchmarkJobResult]
    measured_on: str
    prefill: list[dict[str, Any]]
    decode: list[dict[str, Any]]


def is_decoder_run(variants: list[VariantResult]) -> bool:
    """Whether the run timed its variants as a decoder (any variant has decoding figures)."""
    return any(v.decoding is not None for v in variants)


def decoder_figures(variant: VariantResult) -> dict[str, Any]:
    """The variant's decoder columns (None where it has no figure, e.g. a failed one)."""
    timed = variant.decoding
    metrics = variant.accuracy.task_metrics if variant.accuracy else {}
    return {
        "tokens/s": timed.tokens_per_s if timed else None,
        "FP32 tokens/s": timed.original_tokens_per_s if timed else None,
        "TTFT (ms)": timed.ttft_ms if timed else None,
        "FP32 TTFT (ms)": timed.original_ttft_ms if timed else None,
        "perplexity": metrics.get("perplexity"),
        "FP32 perplexity": metrics.get("reference_perplexity"),
        "perplexity increase": metrics.get("perplexity_increase"),
        "size (MB)": timed.size_bytes / MB if timed else None,
        "size vs FP32": timed.size_ratio if timed else None,
    }


def bench_rows(report: DecoderBenchReport) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(TTFT per prompt length, decoding per batch size) rows of a decoder benchmark."""
    prefill = [
        {"prompt tokens": p.prompt_tokens, "TTFT (ms)": round(p.ttft_ms, 3), "repeats": p.repeats}
        for p in report.prefill
    ]
    decode = [
        {
            "batch": d.batch,
            "tokens/s": round(d.tokens_per_s, 1),
            "ms per token p50": round(d.ms_per_token_p50, 3),
            "ms per token p99": round(d.ms_per_token_p99, 3),
            "steps": d.steps,
            "prompt tokens": d.prompt_tokens,
        }
        for d in report.decode
    ]
    return prefill, decode
