"""Finding a job's stored model files, on this machine (downloaded once from S3 if need be)."""

from __future__ import annotations

from pathlib import Path

from optistudio.core.errors import InvalidSpec
from optistudio.core.model.info import ModelInfo
from optistudio.db.models import Job, Model
from optistudio.services.artifact_store import store_for
from optistudio.services.settings import get_settings


def model_of(job: Job) -> tuple[Path, ModelInfo]:
    if job.model is None:
        raise InvalidSpec(f"Job {job.id} has no model.")
    return stored_file(job.model)


def stored_file(model: Model) -> tuple[Path, ModelInfo]:
    path = store_for(get_settings()).local_model(model.path, model.sha256)
    return path, ModelInfo.model_validate(model.info)
