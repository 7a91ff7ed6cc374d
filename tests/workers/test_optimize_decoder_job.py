"""The optimize job on a stored decoder: judged on the user's text (token ids here), timed as a
decoder, and its weight-only variant stored like any other."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from decoder_models import TinyShape, build_tiny_decoder

from optistudio.core.measure.compare import ComparisonSpec
from optistudio.db.models import JobKind, JobStatus
from optistudio.services.jobkinds import OPTIMIZE, OptimizeJobSpec
from tests.workers.conftest import finished_job

QUICK = ComparisonSpec(min_pairs=4, min_seconds=0.1, max_seconds=1.0, threads=1)


def test_a_stored_decoder_is_judged_on_the_users_text(  # type: ignore[no-untyped-def]
    db_factory, store_model, tmp_path: Path
) -> None:
    folder = build_tiny_decoder(tmp_path / "decoder")
    model = folder / "model.onnx" if folder.is_dir() else folder
    model_id = store_model(model, name="decoder")
    ids = tmp_path / "ids.npy"
    np.save(ids, np.random.default_rng(3).integers(0, TinyShape().vocab, 300))
    spec = OptimizeJobSpec(recipes=["int8_weight_only"], comparison=QUICK, data_path=str(ids))

    job = finished_job(db_factory, JobKind.optimize, model_id, spec)

    assert job.status == JobStatus.succeeded, job.message
    result = OPTIMIZE.parse_result(job.result)
    [variant] = result.variants
    assert variant.status == "made" and variant.model_id is not None, variant.error
    assert variant.decoding is not None and variant.decoding.tokens_per_s > 0
    metrics = variant.accuracy.task_metrics if variant.accuracy else {}
    assert "perplexity_increase" in metrics
    assert variant.builtin_samples is None  # judged on the user's ids, not built-in text


def test_an_openvino_ir_variant_stays_in_the_jobs_folder(tmp_path: Path) -> None:
    """A decoder's NNCF INT4 variant is an OpenVINO IR without its tokenizer and configs, so it
    is kept where the run wrote it (not offered to the catalog, which refused it as 'not ONNX' and
    turned a made, timed and judged variant into a failed one)."""
    from types import SimpleNamespace

    from optistudio.core.optimize.recipes import Recipe
    from optistudio.core.optimize.variant import VariantResult
    from optistudio.workers.optimize_job import Made, _store_variant

    ir = tmp_path / "model.xml"
    ir.write_text("<net/>")
    variant = VariantResult(
        recipe=Recipe(name="int4_nncf", label="INT4", steps=[]), precision="int4"
    )
    variant.status, variant.path = "made", str(ir)
    job = SimpleNamespace(model=SimpleNamespace(id=1, name="decoder"))

    made = Made(info=None, decoder=True)  # type: ignore[arg-type]  # a decoder's run
    assert _store_variant(job, variant, context=None, made=made) is None  # type: ignore[arg-type]
    assert variant.status == "made" and ir.is_file()
