"""Variants that run a file on a backend at a precision of their own, as catalog entries.

BF16 inference on OpenVINO changes no byte of the original, and NNCF's INT8 with the rest in
BF16 times the INT8 file again: such a variant used to be stored as the file it runs, so it got
that file's model id and exported as ONNX Runtime at FP32. Here it is a model of its own (its
recipe, backend, precision and threads on its row) that points at the same stored file, so
Compare, the studio's pages and the export name it by its own id.

NNCF's INT8 on the OpenVINO model is an OpenVINO IR (.xml + .bin), which only OpenVINO runs:
stored here as model.xml + model.bin under the hash of both, read by OpenVINO on the stored copy
before it is placed (optistudio.core.model.stored_ir), a variant with backend openvino and its
precision like the others. Only variants the studio's passes made come this way; uploads of an
.xml stay refused (docs/SECURITY.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from optistudio.core.model.content_address import IR_SUFFIX
from optistudio.core.model.info import ModelInfo
from optistudio.core.model.intake import StoredModel, store_model
from optistudio.core.model.stored_ir import store_ir
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
    like: ModelInfo | None = None,
) -> CatalogEntry:
    """Store `source` (the same bytes as a model already stored are stored once) and record the
    variant that runs it on `backend` at `precision`; the same run twice gives one model. An
    OpenVINO IR (.xml) needs `like`, the card of the model it was made from."""
    stored = _stored(source, settings, like)
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


def _stored(source: Path, settings: Settings, like: ModelInfo | None) -> StoredModel:
    """The variant's file stored: an IR checked by OpenVINO's reader (stored_ir), an ONNX
    file by intake (made here from a stored model: no upload limit, no load check)."""
    if source.suffix == IR_SUFFIX:
        if like is None:
            raise ValueError("an OpenVINO IR is stored with the card of the model it came from")
        return store_ir(source, artifact_dir=settings.artifact_dir, like=like)
    return store_model(
        source, artifact_dir=settings.artifact_dir, max_tensor_bytes=settings.max_tensor_bytes
    )
