"""What the worker tests share: a job made, run and read back as a worker runs it, through
`run_job` on this test's migrated database (the `db_factory` and `app_settings` fixtures of
tests/conftest.py), with no broker.

`finished_job` is the whole sequence (queue a row, run it, read it back); `succeeded_job` the
same for a test whose job is only its arrangement (a page or service to read it next), refused
unless it succeeded; `queue_job`, `work_job` and `read_job` are its steps, for a test that acts
between them (or whose job a page or service queued). Import these
helpers as `from tests.workers.conftest import ...`, never a bare `conftest`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from sqlalchemy.orm import Session, sessionmaker

from optistudio.db.models import Job, JobKind, JobStatus
from optistudio.db.queries import create_job, get_job
from optistudio.db.session import transaction
from optistudio.services.catalog import add_model_file
from optistudio.workers.jobs import Work, run_job
from optistudio.workers.work import work_of

WORKER = "test"
"""The worker name every job here is claimed under."""

Spec = Mapping[str, Any] | BaseModel
"""A job's spec: a pydantic spec (stored as its JSON dump, as a page stores it) or the dict
to store as it is (a spec that does not validate, an empty one)."""


def queue_job(
    factory: sessionmaker[Session], kind: JobKind, spec: Spec, model_id: int | None
) -> int:
    """A queued job row of `kind` on the model, committed; its id."""
    stored = spec.model_dump(mode="json") if isinstance(spec, BaseModel) else dict(spec)
    with transaction(factory) as s:
        return create_job(s, kind=kind, spec=stored, model_id=model_id).id


def work_job(
    factory: sessionmaker[Session], job_id: int, work: Work, *, task_id: str | None = "t1"
) -> None:
    """The job claimed and run by `work`, as a worker's task runs it (`run_job`)."""
    run_job(factory, job_id, worker=WORKER, task_id=task_id, work=work)


def read_job(factory: sessionmaker[Session], job_id: int) -> Job:
    """The job row as it is now, its model loaded, readable after its session is closed."""
    with transaction(factory) as s:
        job = get_job(s, job_id=job_id)
        assert job is not None, f"job {job_id} vanished"
        _ = job.model
        s.expunge(job)
        return job


def finished_job(
    factory: sessionmaker[Session],
    kind: JobKind,
    model_id: int | None,
    spec: Spec,
    work: Work | None = None,
) -> Job:
    """A job of `kind` queued, run by `work` (the kind's own work by default) and read back."""
    job_id = queue_job(factory, kind, spec, model_id)
    work_job(factory, job_id, work or work_of(kind))
    return read_job(factory, job_id)


def succeeded_job(
    factory: sessionmaker[Session], kind: JobKind, model_id: int | None, spec: Spec
) -> Job:
    """`finished_job` by the kind's own work, which must have succeeded (its message if not)."""
    job = finished_job(factory, kind, model_id, spec)
    assert job.status == JobStatus.succeeded, job.message
    return job


@pytest.fixture
def store_model(db_factory: Any, app_settings: Any) -> Callable[..., int]:
    """Adds a model file to this test's catalog: `store_model(path, name=..., **kwargs)` (the
    name defaults to the file's stem; kwargs go to `add_model_file`) gives its model id."""

    def store(path: Path, name: str | None = None, **kwargs: Any) -> int:
        added = add_model_file(db_factory, app_settings, path, name=name or path.stem, **kwargs)
        return added.model_id

    return store
