"""Deleting what a user stored: a model with its variants, results, jobs and files; a result; a job.

A `DeletionPlan` says what would go and what it frees ("2 variants, 3 results, 5 jobs, 12.3 MB
on disk"): the confirmation the studio and the CLI show. Deleting makes the same plan again in
one transaction with the job rows locked (no worker claims one meanwhile), refuses while one of
its jobs is queued or running, deletes the rows (measurements, jobs, then models, each variant
before the model it was made from), commits, and only then removes the files: a failure before
the commit leaves every file in place.

The files are the local artifact folder's: a model's content-addressed folder (one per model
row: the same bytes are one model, `get_or_create_model`), each job's output folder
(`jobs/<id>`: an optimize job's outputs, an export's bundle, a generated clip), and a stored
data file (`datasets/<sha256>.<suffix>`) that no job left behind names in its spec, since jobs
share data files by content. With an S3 store the bucket's copies stay (a lifecycle rule on the
bucket is the place to expire them); this machine's cached copy goes.

A model's jobs are those run on it and those naming it in their spec (a comparison's
candidate, a profiled variant): their figures describe a model that is gone. Deleting a job
keeps the variants an optimize job made: they are models, deleted from the Models page.
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from optistudio.core.errors import OptistudioError
from optistudio.db.models import Job, JobKind, JobStatus, Model
from optistudio.db.queries import (
    delete_jobs,
    delete_models,
    jobs_by_ids,
    jobs_mentioning,
    jobs_of_models,
    measurement_count,
    model_lineage,
)
from optistudio.db.session import transaction
from optistudio.services.artifact_store import DATA_FOLDER, model_folder
from optistudio.services.jobkinds import JOB_KINDS
from optistudio.services.settings import Settings

log = logging.getLogger(__name__)

JOBS_FOLDER = "jobs"
"""Where the workers write each job's outputs: `artifact_dir/jobs/<job id>`."""
_DATA_NAME = re.compile(r"[0-9a-f]{64}(\.\w+)+")
"""How `catalog.store_dataset` names a stored data file: its SHA-256 and suffix."""
MODEL_REFERENCES = tuple(
    sorted(
        {
            name
            for info in JOB_KINDS.values()
            for name in info.spec.model_fields
            if name.endswith("_model_id")
        }
    )
)
"""The spec fields in which a job names another model than its own (`candidate_model_id`...)."""
UNFINISHED = (JobStatus.queued, JobStatus.running)


class DeleteRefused(OptistudioError):
    """Nothing was deleted: the thing is missing, or one of its jobs has not finished."""


class DeletionPlan(BaseModel):
    """What deleting one thing removes, and what it frees on disk."""

    model_config = ConfigDict(extra="forbid")

    subject: str = Field(description="What is deleted, for a person: 'model #3 resnet'.")
    model_ids: list[int] = Field(description="The models deleted: the model, then its variants.")
    variants: int = Field(description="How many of those models are variants of the first.")
    job_ids: list[int] = Field(description="Every job deleted, with its measurements.")
    result_ids: list[int] = Field(description="Those of the jobs that succeeded (results).")
    measurements: int = Field(description="Measured numbers stored by those jobs.")
    unfinished: dict[int, str] = Field(description="Job id -> status of jobs still going.")
    paths: list[str] = Field(description="Folders and files removed after the commit.")
    bytes_by_part: dict[str, int] = Field(
        description="Bytes on disk freed: 'model', 'variants', 'jobs' (their output folders), "
        "'data' (stored data files no other job uses)."
    )
    kept: list[str] = Field(default_factory=list, description="What stays, and why.")

    @property
    def bytes_on_disk(self) -> int:
        return sum(self.bytes_by_part.values())

    def freed(self) -> str:
        """'2 variants, 3 results, 5 jobs, 12.3 MB on disk'."""
        counts = [(self.variants, "variant"), (len(self.result_ids), "result")]
        counts.append((len(self.job_ids), "job"))
        parts = [_count(n, noun) for n, noun in counts if n or noun == "job"]
        return ", ".join([*parts, f"{megabytes(self.bytes_on_disk)} on disk"])

    def sentence(self) -> str:
        """The confirmation: what goes and what it frees."""
        return f"Deletes {self.subject}: {self.freed()}."

    def refusal(self) -> DeleteRefused | None:
        """Why this cannot be deleted now (a job still queued or running), or None."""
        if not self.unfinished:
            return None
        said = ", ".join(f"job {i} is {status}" for i, status in self.unfinished.items())
        them = "it" if len(self.unfinished) == 1 else "them"
        return DeleteRefused(
            f"{said[0].upper()}{said[1:]}: cancel {them} first. Nothing was deleted.",
            hint="Cancel on the Jobs page (a running job stops at its next checkpoint), then "
            "delete again.",
        )


def megabytes(size: int) -> str:
    """Bytes as a person reads them on a confirmation: '12.3 MB' (decimal), '0.4 kB', '0 MB'."""
    if size == 0:
        return "0 MB"
    if size < 100_000:
        return f"{size / 1000:.1f} kB"
    return f"{size / 1e6:.1f} MB"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


# -- plans ----------------------------------------------------------------------------------


def plan_model_deletion(
    factory: sessionmaker[Session], settings: Settings, *, model_id: int
) -> DeletionPlan:
    """What deleting this model would remove (DeleteRefused when it does not exist)."""
    with transaction(factory) as s:
        return model_plan(s, settings, model_id=model_id)


def plan_job_deletion(
    factory: sessionmaker[Session], settings: Settings, *, job_id: int, result: bool = False
) -> DeletionPlan:
    """What deleting this job (`result`: this job's result, refused for a job without one)
    would remove."""
    with transaction(factory) as s:
        return job_plan(s, settings, job_id=job_id, result=result)


def model_plan(
    s: Session, settings: Settings, *, model_id: int, for_update: bool = False
) -> DeletionPlan:
    """The plan for a model, in the caller's transaction (`for_update`: its jobs locked)."""
    lineage = model_lineage(s, model_id=model_id)
    if not lineage:
        raise DeleteRefused(
            f"No model #{model_id} is stored.",
            hint="The Models page and `optistudio models` list the stored models.",
        )
    ids = [model.id for model in lineage]
    jobs = jobs_of_models(s, model_ids=ids, spec_keys=MODEL_REFERENCES, for_update=for_update)
    original, variants = lineage[0], lineage[1:]
    parts = {
        "model": _size(_model_folders(settings, [original])),
        "variants": _size(_model_folders(settings, variants)),
    }
    plan = _jobs_plan(s, settings, jobs, subject=f"model #{original.id} {original.name}")
    paths = _model_folders(settings, lineage) + [Path(p) for p in plan.paths]
    return plan.model_copy(
        update={
            "model_ids": ids,
            "variants": len(variants),
            "paths": [str(p) for p in paths],
            "bytes_by_part": parts | plan.bytes_by_part,
        }
    )


def job_plan(
    s: Session, settings: Settings, *, job_id: int, result: bool = False, for_update: bool = False
) -> DeletionPlan:
    """The plan for a job (or its result), in the caller's transaction."""
    jobs = jobs_by_ids(s, job_ids=[job_id], for_update=for_update)
    if not jobs:
        raise DeleteRefused(
            f"No job #{job_id} is stored.", hint="The Jobs page and `optistudio jobs` list them."
        )
    [job] = jobs
    if result and job.status is not JobStatus.succeeded:
        raise DeleteRefused(
            f"Job {job_id} has no result to delete (it is {job.status.value}).",
            hint=f"Delete the job itself: `optistudio jobs delete {job_id}`, or on the Jobs page.",
        )
    subject = f"the result of job #{job_id}" if result else f"job #{job_id}"
    plan = _jobs_plan(s, settings, jobs, subject=subject)
    return plan.model_copy(update={"kept": _kept_variants(job)})


def _jobs_plan(s: Session, settings: Settings, jobs: list[Job], *, subject: str) -> DeletionPlan:
    ids = [job.id for job in jobs]
    folders = [f for f in (_job_folder(settings, i) for i in ids) if f.exists()]
    data = _unused_data_files(s, settings, jobs)
    return DeletionPlan(
        subject=subject,
        model_ids=[],
        variants=0,
        job_ids=ids,
        result_ids=[job.id for job in jobs if job.status is JobStatus.succeeded],
        measurements=measurement_count(s, job_ids=ids),
        unfinished={job.id: job.status.value for job in jobs if job.status in UNFINISHED},
        paths=[str(p) for p in folders + data],
        bytes_by_part={"jobs": _size(folders), "data": _size(data)},
    )


def _kept_variants(job: Job) -> list[str]:
    """An optimize job's stored variants, which deleting the job keeps."""
    if job.kind is not JobKind.optimize:
        return []
    report = JOB_KINDS[job.kind].read_result(job.result)
    ids = [v.model_id for v in getattr(report, "variants", []) if v.model_id is not None]
    if not ids:
        return []
    listed = ", ".join(f"#{i}" for i in ids)
    return [f"The variants it stored stay as models ({listed}); delete them on the Models page."]


# -- carrying it out ------------------------------------------------------------------------


def delete_model(
    factory: sessionmaker[Session], settings: Settings, *, model_id: int
) -> DeletionPlan:
    """Delete a model, its variants, every job on them and their files; what went."""
    return _carry_out(
        factory, lambda s: model_plan(s, settings, model_id=model_id, for_update=True), settings
    )


def delete_job(
    factory: sessionmaker[Session], settings: Settings, *, job_id: int, result: bool = False
) -> DeletionPlan:
    """Delete a finished job (`result`: only one that succeeded), its measurements and files."""
    return _carry_out(
        factory,
        lambda s: job_plan(s, settings, job_id=job_id, result=result, for_update=True),
        settings,
    )


def _carry_out(
    factory: sessionmaker[Session],
    make_plan: Callable[[Session], DeletionPlan],
    settings: Settings,
) -> DeletionPlan:
    """Plan under lock, refuse or delete the rows, commit; then remove the files."""
    try:
        with transaction(factory) as s:
            plan = make_plan(s)
            refusal = plan.refusal()
            if refusal is not None:
                raise refusal
            delete_jobs(s, job_ids=plan.job_ids)
            delete_models(s, model_ids=plan.model_ids)
    except IntegrityError:  # a job or variant was stored on it between the plan and the delete
        raise DeleteRefused(
            f"Something new was stored on {plan.subject} while it was being deleted. Nothing "
            "was deleted.",
            hint="Delete again: the confirmation will count what was added.",
        ) from None
    for path in plan.paths:
        _remove(Path(path), settings)
    return plan


def _remove(path: Path, settings: Settings) -> None:
    """Remove a file or folder inside the artifact folder; a failure is logged (its rows are
    already gone, so nothing names it any more)."""
    if not _inside(path, settings.artifact_dir):
        log.warning("not removing %s: it is outside the artifact folder", path)
        return
    try:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("could not remove %s: %s", path, exc)


# -- files ----------------------------------------------------------------------------------


def _model_folders(settings: Settings, models: list[Model]) -> list[Path]:
    """Each model's content-addressed folder that exists here."""
    folders = [model_folder(settings.artifact_dir, model.sha256) for model in models]
    return [folder for folder in folders if folder.is_dir()]


def _job_folder(settings: Settings, job_id: int) -> Path:
    return Path(settings.artifact_dir) / JOBS_FOLDER / str(job_id)


def _unused_data_files(s: Session, settings: Settings, jobs: list[Job]) -> list[Path]:
    """Stored data files these jobs name that no other job names."""
    folder = Path(settings.artifact_dir) / DATA_FOLDER
    names = sorted({name for job in jobs for name in _data_names(job.spec)})
    ids = [job.id for job in jobs]
    return [
        folder / name
        for name in names
        if (folder / name).is_file() and not jobs_mentioning(s, text=name, excluding=ids)
    ]


def _data_names(value: Any) -> Iterator[str]:
    """The names of stored data files anywhere in a spec (the strings that are such paths)."""
    if isinstance(value, dict):
        for item in value.values():
            yield from _data_names(item)
    elif isinstance(value, list):
        for item in value:
            yield from _data_names(item)
    elif isinstance(value, str) and _is_data_file(Path(value)):
        yield Path(value).name


def _is_data_file(path: Path) -> bool:
    return path.parent.name == DATA_FOLDER and bool(_DATA_NAME.fullmatch(path.name))


def _size(paths: list[Path]) -> int:
    """Bytes of these files and everything under these folders."""
    total = 0
    for path in paths:
        files = path.rglob("*") if path.is_dir() else [path]
        total += sum(f.stat().st_size for f in files if f.is_file() and not f.is_symlink())
    return total


def _inside(path: Path, folder: Path) -> bool:
    return (
        path.resolve().is_relative_to(Path(folder).resolve())
        and path.resolve() != Path(folder).resolve()
    )
