"""A stored decoder's runs as the pages read them: its optimize variants by tokens/s, TTFT,
perplexity and size (not p50 and cosine), and its benchmark by TTFT per prompt length and
tokens/s per batch. The jobs are the real worker jobs on a tiny decoder, run in process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from decoder_models import TinyShape, build_tiny_decoder
from sqlalchemy.orm import Session, sessionmaker

from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.core.measure.compare import ComparisonSpec
from optistudio.db.models import JobKind
from optistudio.services.catalog import add_model_file
from optistudio.services.jobkinds import OptimizeJobSpec
from optistudio.studio.formatting import EMPTY
from optistudio.studio.optimize_services import optimization_runs, variants_table
from optistudio.studio.results_services import decoder_benchmarks
from tests.workers.conftest import succeeded_job

QUICK = ComparisonSpec(min_pairs=4, min_seconds=0.1, max_seconds=1.0, threads=1)


def run(factory: sessionmaker[Session], kind: JobKind, spec: Any, model_id: int) -> None:
    succeeded_job(factory, kind, model_id, spec)


def stored_decoder(factory: sessionmaker[Session], settings: Any, folder: Path) -> int:
    model = build_tiny_decoder(folder)
    return add_model_file(factory, settings, model, name="decoder").model_id


def test_a_decoders_variants_read_by_decoding_perplexity_and_size(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path: Path
) -> None:
    model_id = stored_decoder(db_factory, app_settings, tmp_path / "decoder")
    ids = tmp_path / "ids.npy"
    np.save(ids, np.random.default_rng(3).integers(0, TinyShape().vocab, 300))
    spec = OptimizeJobSpec(recipes=["int8_weight_only"], comparison=QUICK, data_path=str(ids))
    run(db_factory, JobKind.optimize, spec, model_id)

    [page] = optimization_runs(db_factory, model_id=model_id)
    [row] = page.variants
    assert page.decoder and row["outcome"] == "made", row["error"]
    assert page.inputs == "" and page.not_your_data == ""  # fed by its decode loop, on ids
    assert row["tokens/s"] > 0 and row["FP32 tokens/s"] > 0
    assert row["TTFT (ms)"] > 0 and row["FP32 TTFT (ms)"] > 0
    assert row["perplexity"] > 0 and row["FP32 perplexity"] > 0
    assert row["perplexity increase"] is not None
    assert 0 < row["size vs FP32"] < 1  # INT8 weights are a quarter of FP32's bytes
    table = variants_table(page.variants, page.task_name, page.task_metrics)
    assert {"tokens/s", "TTFT (ms)", "perplexity increase", "size vs FP32"} <= set(table)
    assert not {"mean cosine", "variant p50 (ms)", "top-1 drop"} & set(table)
    assert EMPTY not in set(table.iloc[0][["tokens/s", "perplexity", "size (MB)"]])


def test_a_decoder_judged_on_built_in_text_is_told_so_in_its_terms(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path: Path
) -> None:
    model_id = stored_decoder(db_factory, app_settings, tmp_path / "decoder")
    spec = OptimizeJobSpec(recipes=["int8_weight_only"], comparison=QUICK)
    run(db_factory, JobKind.optimize, spec, model_id)

    [page] = optimization_runs(db_factory, model_id=model_id)

    assert page.decoder and "built-in text" in page.data
    assert "built-in text" in page.not_your_data and "perplexity" in page.not_your_data
    assert "agreement with the original" not in page.not_your_data
    assert page.inputs == ""


def test_a_decoders_benchmark_reads_as_ttft_and_tokens_per_second(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path: Path
) -> None:
    model_id = stored_decoder(db_factory, app_settings, tmp_path / "decoder")
    run(db_factory, JobKind.benchmark, BenchmarkSpec(threads=1, batch_sizes=[1, 2]), model_id)

    [bench] = decoder_benchmarks(db_factory, model_id=model_id)
    assert [row["batch"] for row in bench.decode] == [1, 2]
    assert all(row["tokens/s"] > 0 for row in bench.decode)
    assert [row["prompt tokens"] for row in bench.prefill] == [32, 128]  # context is 128
    assert all(row["TTFT (ms)"] > 0 for row in bench.prefill)
    assert "onnxruntime, 1 threads" in bench.measured_on
