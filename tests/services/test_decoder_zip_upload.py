"""A decoder's folder uploaded as a .zip: its graph is stored with the configs and tokenizer
beside it, so the bundle's genai/ folder carries the tokenizer and the optimize job tokenizes
the user's .txt with it."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
from decoder_models import build_tiny_decoder
from decoder_tokenizers import TEXT, train_tokenizer

from optistudio.core.errors import ModelRejected
from optistudio.core.measure.compare import ComparisonSpec
from optistudio.core.report.bundle import write_bundle
from optistudio.db.models import JobKind
from optistudio.services.bundles import bundle_source
from optistudio.services.catalog import add_upload, store_dataset
from optistudio.services.jobkinds import OPTIMIZE, OptimizeJobSpec
from tests.workers.conftest import succeeded_job

QUICK = ComparisonSpec(min_pairs=4, min_seconds=0.1, max_seconds=1.0, threads=1)


def zipped(folder: Path, prefix: str = "tiny-decoder/") -> io.BytesIO:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(folder.iterdir()):
            archive.write(path, prefix + path.name)
    buffer.seek(0)
    return buffer


def test_a_zipped_decoder_folder_keeps_its_tokenizer_and_is_judged_on_a_text(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path: Path
) -> None:
    folder = tmp_path / "decoder"
    build_tiny_decoder(folder)
    train_tokenizer(folder)
    (folder / "generation_config.json").write_text(json.dumps({"max_length": 64}))

    entry = add_upload(db_factory, app_settings, zipped(folder), filename="tiny-decoder.zip")

    stored = entry.path.parent
    assert entry.path.name == "model.onnx" and entry.name == "tiny-decoder"
    for name in ("tokenizer.json", "genai_config.json", "generation_config.json"):
        assert (stored / name).read_bytes() == (folder / name).read_bytes()
    source = bundle_source(db_factory, app_settings, entry.model_id)
    source.coreml_precisions = []
    bundle = write_bundle(source, tmp_path / "bundle.zip")
    assert "genai_tokenizer" not in bundle.skipped
    with zipfile.ZipFile(bundle.path) as members:
        assert members.read("genai/tokenizer.json") == (folder / "tokenizer.json").read_bytes()
    text = store_dataset(app_settings, io.BytesIO(TEXT.encode()), filename="story.txt")
    spec = OptimizeJobSpec(recipes=["int8_weight_only"], comparison=QUICK, data_path=str(text))
    job = succeeded_job(db_factory, JobKind.optimize, entry.model_id, spec)
    [variant] = OPTIMIZE.parse_result(job.result).variants
    assert variant.status == "made", variant.error
    assert variant.builtin_samples is None  # the user's text, by the stored tokenizer
    assert "perplexity" in (variant.accuracy.task_metrics if variant.accuracy else {})


def test_a_zip_member_outside_the_folder_is_refused(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path: Path
) -> None:
    folder = tmp_path / "decoder"
    build_tiny_decoder(folder)

    with pytest.raises(ModelRejected, match="outside the model's folder"):
        add_upload(db_factory, app_settings, zipped(folder, "../"), filename="evil.zip")
