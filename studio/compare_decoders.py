"""A decoder's benchmark on the Compare page: one row per batch size its decoding was timed at.

A benchmark of a decoder with a KV cache stores no measurement rows: its result carries the
decoder report (optistudio.core.llm.serving), TTFT per prompt length and greedy decoding per
batch size. Each decode batch becomes a row keyed like any benchmark result
(`job.backend.batch.threads`), with tokens/s, time per token p50 / p99 (the p50 also fills p50
latency, so the row sits on the same charts as other results), throughput in tokens per second,
the TTFT of the shortest prompt it timed, the size on disk and the peak resident memory. It has
no accuracy figures: a benchmark judges nothing; an optimize run's variants carry perplexity.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from optistudio.core.llm.serving import DecoderBenchReport
from optistudio.core.report.snapshot import ResultRow
from optistudio.db.models import Job, JobKind
from optistudio.db.queries import finished_jobs
from optistudio.services.jobkinds import BENCHMARK

MB = 1e6
LOOKBACK = 100
"""Newest benchmark jobs searched for decoder reports."""


def decoder_reports(s: Session) -> list[tuple[Job, DecoderBenchReport]]:
    """The newest succeeded benchmarks that timed a decoder, with their reports."""
    found = []
    for job in finished_jobs(s, kind=JobKind.benchmark, limit=LOOKBACK):
        result = BENCHMARK.read_result(job.result)
        if result is not None and result.decoder is not None:
            found.append((job, result.decoder))
    return found


def decoder_key(job_id: int, report: DecoderBenchReport, batch: int) -> str:
    return f"{job_id}.{report.backend}.{batch}.{_threads(report)}"


def decoder_options(s: Session) -> dict[str, str]:
    """Key -> label of every decode batch of the newest decoder benchmarks."""
    options = {}
    for job, report in decoder_reports(s):
        name = job.model.name if job.model else "deleted model"
        for timing in report.decode:
            options[decoder_key(job.id, report, timing.batch)] = (
                f"#{job.id} {name} [decoder] · {report.backend} · decoding at batch "
                f"{timing.batch} · {_threads(report)} threads"
            )
    return options


def decoder_rows(s: Session, keys: list[str]) -> dict[str, ResultRow]:
    """The rows of the keys among `keys` that name a stored decoder benchmark's batch."""
    wanted = set(keys)
    rows: dict[str, ResultRow] = {}
    for job, report in decoder_reports(s):
        for timing in report.decode:
            key = decoder_key(job.id, report, timing.batch)
            if key in wanted:
                rows[key] = _row(key, job, report, timing.batch)
    return rows


def _row(key: str, job: Job, report: DecoderBenchReport, batch: int) -> ResultRow:
    timing = next(t for t in report.decode if t.batch == batch)
    metrics: dict[str, Any] = {
        "tokens_per_s": timing.tokens_per_s,
        "ms_per_token_p50": timing.ms_per_token_p50,
        "ms_per_token_p99": timing.ms_per_token_p99,
        "p50_ms": timing.ms_per_token_p50,
        "p99_ms": timing.ms_per_token_p99,
        "throughput": timing.tokens_per_s,
        "size_mb": report.size_bytes / MB,
    }
    if report.peak_rss_mb is not None:
        metrics["peak_rss_mb"] = report.peak_rss_mb
    if report.prefill:
        shortest = min(report.prefill, key=lambda p: p.prompt_tokens)
        metrics["ttft_ms"] = shortest.ttft_ms
    ttft = (
        f"; TTFT of a {min(p.prompt_tokens for p in report.prefill)}-token prompt"
        if report.prefill
        else ""
    )
    return ResultRow(
        key=key,
        job_id=job.id,
        model_id=job.model_id,
        model=job.model.name if job.model else "deleted model",
        parent_id=job.model.parent_id if job.model else None,
        precision=(job.model.precision if job.model else None) or "fp32",
        backend=report.backend,
        batch_size=batch,
        threads=_threads(report),
        environment_id=job.environment_id,
        metrics=metrics,
        accuracy_note=(
            f"decoder benchmark #{job.id}: greedy decoding at batch {batch} after a "
            f"{timing.prompt_tokens}-token prompt ({timing.steps} steps){ttft}; a benchmark "
            "judges no accuracy"
        ),
    )


def _threads(report: DecoderBenchReport) -> int:
    threads = report.environment.get("threads")
    return threads if isinstance(threads, int) else 0
