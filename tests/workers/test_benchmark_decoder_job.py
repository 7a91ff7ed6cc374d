"""The benchmark job on a stored decoder times decoding, not one forward pass: the result's
`decoder` report holds TTFT per prompt length and tokens/s per batch; no measurement rows."""

from __future__ import annotations

from pathlib import Path

from decoder_models import build_tiny_decoder
from sqlalchemy import select

from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.db.models import JobKind, JobStatus, Measurement
from optistudio.db.session import transaction
from optistudio.services.jobkinds import BENCHMARK
from tests.workers.conftest import finished_job


def benchmark(db_factory, store_model, model: Path, spec: BenchmarkSpec):  # type: ignore[no-untyped-def]
    job = finished_job(db_factory, JobKind.benchmark, store_model(model, name="decoder"), spec)
    with transaction(db_factory) as s:
        rows = s.scalars(select(Measurement).where(Measurement.job_id == job.id)).all()
    return job.status, job.message, job.result, len(rows)


def test_a_decoders_benchmark_is_its_decoding(  # type: ignore[no-untyped-def]
    db_factory, store_model, tmp_path: Path
) -> None:
    model = build_tiny_decoder(tmp_path / "decoder")
    status, message, stored, rows = benchmark(
        db_factory, store_model, model, BenchmarkSpec(threads=1, batch_sizes=[1, 3])
    )

    assert status == JobStatus.succeeded, message
    report = BENCHMARK.parse_result(stored).decoder
    assert report is not None and rows == 0
    assert [d.batch for d in report.decode] == [1, 3]
    assert all(d.tokens_per_s > 0 and d.steps > 0 for d in report.decode)
    assert [p.prompt_tokens for p in report.prefill] == [32, 128]
    assert report.size_bytes > 0 and report.environment
    assert report.peak_rss_mb is not None and report.model_rss_mb is not None
    assert report.peak_rss_mb > 0 and report.model_rss_mb >= 0
    assert "tokens/s at batch 3" in message and "ms at 128" in message


def test_a_decoder_is_not_converted_to_another_precision(  # type: ignore[no-untyped-def]
    db_factory, store_model, tmp_path: Path
) -> None:
    model = build_tiny_decoder(tmp_path / "decoder")
    status, message, _, _ = benchmark(
        db_factory, store_model, model, BenchmarkSpec(threads=1, precision="fp16")
    )

    assert status == JobStatus.failed and "not converted to fp16" in message


def test_a_decoders_input_profile_is_not_run_before_its_jobs(  # type: ignore[no-untyped-def]
    db_factory, store_model, tmp_path: Path, caplog
) -> None:
    """The decode loop feeds a decoder token ids and its own cache: the sizes intake proposed
    for its inputs are not checked by a run first (which failed, and was logged, every job)."""
    model = build_tiny_decoder(tmp_path / "decoder")
    with caplog.at_level("WARNING"):
        status, message, _, _ = benchmark(
            db_factory, store_model, model, BenchmarkSpec(threads=1, batch_sizes=[1])
        )

    assert status == JobStatus.succeeded, message
    assert "input profile" not in caplog.text
