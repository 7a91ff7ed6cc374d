"""Optimize variants on the Compare page as their optimize job timed them, with no second
benchmark: each made variant and the original it was timed against, in the same run.

Keyed `v<job>.<index>` for the job's variant at that index and `v<job>.o` for its original (a
benchmark result's key is `job.backend.batch.threads`). A row carries the p50 the interleaved
comparison measured (`variant_p50_ms`, `original_p50_ms`), the speedup with its 95 % interval,
and the variant's accuracy report; the percentiles and throughput the comparison does not
measure stay empty, and the row's note says where its figures come from.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy.orm import Session

from optistudio.core.model.info import precision_label
from optistudio.core.optimize.provenance import data_label
from optistudio.core.report.labels import ORIGINAL as ORIGINAL_RECIPE
from optistudio.core.report.snapshot import ResultRow, shown_precision
from optistudio.db.models import JobKind
from optistudio.db.queries import finished_jobs
from optistudio.services.jobkinds import OPTIMIZE
from optistudio.services.jobresults import OptimizeJobResult, StoredVariant

VARIANT_PATTERN = re.compile(r"v(\d{1,12})\.(o|\d{1,4})")
ORIGINAL = "o"
MB = 1e6
OPTIMIZE_RUN = "optimize run"
"""A row's source: timed by its optimize job (p50 and speedup only)."""
LOOKBACK = 100
"""Newest optimize jobs whose variants are offered."""


def variant_key(job_id: int, index: int | None) -> str:
    """`v12.3` for variant 3 of optimize job 12; `v12.o` for the original it was timed against."""
    return f"v{job_id}.{ORIGINAL if index is None else index}"


def variant_options(s: Session) -> dict[str, str]:
    """Key -> label of every timed variant (and its original) of the newest optimize jobs."""
    options: dict[str, str] = {}
    for job in finished_jobs(s, kind=JobKind.optimize, limit=LOOKBACK):
        report = OPTIMIZE.read_result(job.result)
        timed = [(i, v) for i, v in enumerate(report.variants if report else []) if _timed(v)]
        if not timed:
            continue
        name = job.model.name if job.model else "deleted model"
        original = _original_precision(job.model)
        options[variant_key(job.id, None)] = (
            f"#{job.id} {name} [{original}] · original, optimize run"
        )
        for index, variant in timed:
            options[variant_key(job.id, index)] = (
                f"#{job.id} {name} · {variant.recipe.label} [{_precision(variant, _ops(job.model))}] · "
                f"{variant.backend} · optimize run"
            )
    return options


def variant_rows(s: Session, keys: list[str]) -> dict[str, ResultRow]:
    """The rows of the variant keys among `keys` that are still stored, by key."""
    wanted: dict[int, list[tuple[str, str]]] = {}
    for key in keys:
        match = VARIANT_PATTERN.fullmatch(key)
        if match:
            wanted.setdefault(int(match[1]), []).append((key, match[2]))
    rows: dict[str, ResultRow] = {}
    for job in finished_jobs(s, kind=JobKind.optimize, limit=LOOKBACK):
        report = OPTIMIZE.read_result(job.result) if job.id in wanted else None
        if report is None:
            continue
        for key, index in wanted[job.id]:
            row = _row(key, job.id, job.model_id, job.model, job.environment_id, report, index)
            if row is not None:
                rows[key] = row
    return rows


def _row(
    key: str,
    job_id: int,
    model_id: int | None,
    model: Any,
    environment_id: int | None,
    report: OptimizeJobResult,
    index: str,
) -> ResultRow | None:
    name = model.name if model is not None else "deleted model"
    timed = [v for v in report.variants if _timed(v)]
    ops = _ops(model)
    if index == ORIGINAL:
        if not timed:
            return None
        p50 = timed[0].original_p50_ms
        metrics = {
            "p50_ms": p50,
            "cosine_error": 0.0,
            "mean_cosine": 1.0,
            "speedup_vs_original": 1.0,
        } | _original_decoding(timed[0])
        return ResultRow(
            key=key, job_id=job_id, model_id=model_id, model=name, parent_id=None,
            recipe=ORIGINAL_RECIPE, precision=precision_label(None, ops),
            backend=report.variants[0].recipe.backend or "onnxruntime",
            batch_size=1, threads=_threads(report), environment_id=environment_id, metrics=metrics,
            accuracy_note=f"the original, timed by optimize job #{job_id} beside its variants",
            noise=interval_noise(timed[0]), source=OPTIMIZE_RUN,
        )  # fmt: skip
    position = int(index)
    if position >= len(report.variants) or not _timed(report.variants[position]):
        return None
    variant = report.variants[position]
    return ResultRow(
        key=key,
        job_id=job_id,
        model_id=variant.model_id,
        model=name,
        parent_id=model_id,
        recipe=variant.recipe.label,
        precision=_precision(variant, ops),
        backend=variant.backend,
        batch_size=1,
        threads=_threads(report),
        environment_id=environment_id,
        metrics=_metrics(variant),
        accuracy_note=_note(job_id, variant),
        task=variant.accuracy.task if variant.accuracy else None,
        noise=interval_noise(variant),
        source=OPTIMIZE_RUN,
    )


def _threads(report: OptimizeJobResult) -> int:
    """The threads the run timed its variants on; 0 for the runtime's default."""
    return report.spec.comparison.threads or 0


def interval_noise(variant: StoredVariant) -> float | None:
    """The relative noise of the variant's timing: half its speedup interval's width over the
    ratio (0.05: the run could tell it apart from +-5 %); None without an interval."""
    low, high, ratio = variant.ratio_low, variant.ratio_high, variant.ratio
    if not (low and high and ratio):
        return None
    return (high - low) / (2 * ratio)


def _timed(variant: StoredVariant) -> bool:
    return variant.status == "made" and variant.variant_p50_ms is not None


def _precision(variant: StoredVariant, ops: dict[str, int] | None = None) -> str:
    """The variant's precision; one made from an already quantized original stays quantized
    whatever its recipe's precision ('fp16, already quantized (QDQ)')."""
    made = variant.precision or "fp32"
    return shown_precision(precision_label(made, ops or {}), variant.recipe.precision)


def _ops(model: Any) -> dict[str, int]:
    """The original's op histogram (empty for a deleted one)."""
    info = getattr(model, "info", None) or {}
    return dict(info.get("op_histogram") or {})


def _original_precision(model: Any) -> str:
    return precision_label(None, _ops(model))


def _metrics(variant: StoredVariant) -> dict[str, float | None]:
    metrics: dict[str, float | None] = {
        "p50_ms": variant.variant_p50_ms,
        "speedup_vs_original": variant.speedup,
    }
    accuracy = variant.accuracy
    if accuracy is not None:
        metrics |= {
            "mean_cosine": accuracy.mean_cosine,
            "min_cosine": accuracy.min_cosine,
            "max_abs_error": accuracy.max_abs_error,
            "mean_abs_error": accuracy.mean_abs_error,
            "top1_agreement": accuracy.top1_agreement,
            "cosine_error": max(0.0, 1.0 - accuracy.mean_cosine),
        }
        metrics |= dict(_task_metrics(accuracy))
    return metrics | _decoding(variant)


def _decoding(variant: StoredVariant) -> dict[str, float | None]:
    """A decoder variant's decoding at batch 1 beside its p50 latency, which is the figure Auto
    ranked by (ms per token at batch 1 by default, else TTFT or ms per step at batch N)."""
    figures = variant.decoding
    if figures is None:
        return {}
    return {
        "tokens_per_s": figures.tokens_per_s,
        "ttft_ms": figures.ttft_ms,
        "ms_per_token_p50": figures.ms_per_token_p50,
        "ms_per_token_p99": figures.ms_per_token_p99,
        "size_mb": figures.size_bytes / MB,
        "size_vs_fp32": figures.size_ratio,
    }


def _original_decoding(variant: StoredVariant) -> dict[str, float | None]:
    """The FP32 original's decoding as the same run timed it beside `variant`, and its text's
    perplexity (the variants' reference)."""
    figures = variant.decoding
    if figures is None:
        return {}
    metrics = _task_metrics(variant.accuracy) if variant.accuracy else {}
    perplexity = metrics.get("reference_perplexity")
    return {
        "tokens_per_s": figures.original_tokens_per_s,
        "ttft_ms": figures.original_ttft_ms,
        "ms_per_token_p50": figures.original_ms_per_token_p50,
        "size_mb": figures.original_size_bytes / MB,
        "size_vs_fp32": 1.0,
        "perplexity_increase": 0.0,
    } | ({"perplexity": perplexity} if perplexity is not None else {})


def _task_metrics(accuracy: Any) -> dict[str, float | None]:
    return dict(getattr(accuracy, "task_metrics", None) or {})


def _note(job_id: int, variant: StoredVariant) -> str:
    interval = (
        f" (95 % interval {1 / variant.ratio_high:.2f}-{1 / variant.ratio_low:.2f}x)"
        if variant.ratio_low and variant.ratio_high
        else ""
    )
    speed = f"{variant.speedup:.2f}x its original{interval}" if variant.speedup else "timed"
    data = data_label(variant.accuracy.data) if variant.accuracy else "no accuracy report"
    return f"optimize job #{job_id}: {speed}, timed interleaved in the same run; accuracy on {data}"
