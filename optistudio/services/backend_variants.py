"""Variants that run a file on a backend at a precision of their own, as catalog entries.

BF16 inference on OpenVINO changes no byte of the original, and NNCF's INT8 with the rest in
BF16 times the INT8 file again: such a variant used to be stored as the file it runs, so it got
that file's model id and exported as ONNX Runtime at FP32. Here it is a model of its own (its
recipe, backend, precision and threads on its row) that points at the same stored file, so
Compare, the studio's pages and the export name it by its own id.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from optistudio.core.model.intake import store_model
from optistudio.db.queries import get_or_create_backend_variant
from optistudio.db.session import transaction
from optistudio.services.artifact_store import store_for
from optistudio.services.catalog import CatalogEntry
from optistudio.services.settings import Settings

REFERENCE_BACKEND = "onnxruntime"


def recorded_backend(backend: str) -> str:
    """What a variant's row records as its backend: '' for ONNX Runtime, where a file runs as
    it is (so such a variant is the file's model, as before), else the backend's name."""
    return "" if backend == REFERENCE_BACKEND else backend


def add_backend_variant(
    factory: sessionmaker[Session],
    settings: Settings,
    source: Path,
    *,
    name: str,
    parent_id: int,
    recipe: dict[str, Any],
    backend: str,
    precision: str,
    threads: int | None = None,
) -> CatalogEntry:
    """Store `source` (the same bytes as a model already stored are stored once) and record the
    variant that runs it on `backend` at `precision`; the same run twice gives one model."""
    stored = store_model(  # made here from a stored model: no upload limit, no load check
        source, artifact_dir=settings.artifact_dir, max_tensor_bytes=settings.max_tensor_bytes
    )
    address = store_for(settings).publish(stored)
    with transaction(factory) as s:
        model, created = get_or_create_backend_variant(
            s,
            sha256=stored.info.sha256,
            backend=backend,
            precision=precision,
            threads=threads,
            name=name,
            filename=source.name,
            path=address,
            size_bytes=stored.info.size_bytes,
            info=stored.info.model_dump(mode="json"),
            parent_id=parent_id,
            recipe=recipe,
        )
        model_id = model.id
    return CatalogEntry(model_id, created, name, stored.path, stored.info)
