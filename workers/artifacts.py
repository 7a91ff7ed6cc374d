"""Finding a job's stored model files."""

from __future__ import annotations

from pathlib import Path

from core.errors import InvalidSpec, ModelRejected
from core.model_info import ModelInfo
from db.models import Job, Model


def model_of(job: Job) -> tuple[Path, ModelInfo]:
    if job.model is None:
        raise InvalidSpec(f"Job {job.id} has no model.")
    return stored_file(job.model)


def stored_file(model: Model) -> tuple[Path, ModelInfo]:
    path = Path(model.path)
    if not path.exists():
        raise ModelRejected(
            f"The stored file of model {model.name!r} is missing ({path}).",
            hint="Upload the model again.",
        )
    return path, ModelInfo.model_validate(model.info)
