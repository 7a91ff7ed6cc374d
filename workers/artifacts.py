"""Finding a job's stored model files, on this machine (downloaded once from S3 if need be).

`read_model` is how a worker reads a job's model once: its card (`ModelInfo`, parsed from the
row there and nowhere else) and its file, fetched when first asked for. The worker hands that
`JobModel` down to whatever the job runs, so no step re-parses the card or re-inspects the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from optistudio.core.errors import InvalidSpec
from optistudio.core.model.info import ModelInfo
from optistudio.db.models import Job, Model
from optistudio.services.artifact_store import store_for
from optistudio.services.settings import get_settings


@dataclass(frozen=True)
class JobModel:
    """A job's model as its worker read it: the stored row, its card, and its file here."""

    row: Model
    info: ModelInfo

    @cached_property
    def path(self) -> Path:
        """The model's file on this machine (fetched from the artifact store on first use)."""
        return local_file(self.row)


def read_model(job: Job) -> JobModel:
    """The job's model, its card parsed once; InvalidSpec for a job without a model."""
    if job.model is None:
        raise InvalidSpec(f"Job {job.id} has no model.")
    return JobModel(job.model, ModelInfo.model_validate(job.model.info))


def model_of(job: Job) -> tuple[Path, ModelInfo]:
    model = read_model(job)
    return model.path, model.info


def stored_file(model: Model) -> tuple[Path, ModelInfo]:
    return local_file(model), ModelInfo.model_validate(model.info)


def local_file(model: Model) -> Path:
    return store_for(get_settings()).local_model(model.path, model.sha256)
