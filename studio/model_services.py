"""The stored models as the pages read them: the list to pick from, a model's name and card,
its file on this machine (to read its graph, never to run it)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from optistudio.core.errors import OptistudioError
from optistudio.core.model.info import ModelInfo
from optistudio.db.queries import get_model, list_models
from optistudio.db.session import transaction
from optistudio.services.artifact_store import store_for
from optistudio.services.settings import Settings

log = logging.getLogger(__name__)


def model_choices(factory: sessionmaker[Session]) -> list[dict[str, Any]]:
    """Every stored model, as a row to pick from."""
    with transaction(factory) as s:
        return [
            {
                "id": m.id,
                "name": m.name,
                "sha256": m.sha256,
                "path": m.path,
                "size_bytes": m.size_bytes,
                "info": m.info,
                "source": m.source,
                "parent_id": m.parent_id,
                "task": m.task,
                "created_at": m.created_at,
            }
            for m in list_models(s)
        ]


def model_info(factory: sessionmaker[Session], *, model_id: int) -> tuple[str, ModelInfo]:
    """The stored model's name and card."""
    with transaction(factory) as s:
        model = get_model(s, model_id=model_id)
        if model is None:
            raise LookupError(f"model {model_id} is gone")
        return model.name, ModelInfo.model_validate(model.info)


def model_file(settings: Settings, *, path: str, sha256: str) -> Path | None:
    """A stored model's file on this machine (for reading its graph, never to run it), or None
    when the artifact store cannot give it; why is logged."""
    try:
        return store_for(settings).local_model(path, sha256)
    except OptistudioError as exc:
        log.info("model file %s not readable here: %s", path, exc.message)
        return None
