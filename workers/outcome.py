"""A work function typed by its job kind, and how what it gives is stored on the job row.

A kind's work function takes the claimed job, its spec (already validated as the kind's spec
type) and the context, and returns `Done`: the one-line message, the kind's typed result, the
environment the figures were measured in and, for benchmarks, the measurement rows. `JobWork`
turns it into the `Work` that `optistudio.workers.jobs.run_job` runs: it parses the spec and
puts the model's input profile under the spec's own input settings (and records the spec so
fed), and stores the outcome in one transaction (result as validated JSON, environment deduplicated,
measurements replacing an earlier attempt's), so a redelivered job simply writes them again.
The job's model is read once (`read_model`: its card parsed, its file fetched when first asked)
and that `JobModel` serves the profile's check and its laying under; a `ModelWork` kind's
function takes it too, in place of reading the job's model again.

A stored profile that still holds guesses no run confirmed (intake proposes it without running
the model: the studio never runs one) is checked by one run here first, where the job would be
fed by those guesses (`check_needed`, `check_profile`): the sizes that ran are stored as the
model's profile, marked checked, so later jobs skip the check. When none runs, the job runs at
the profile and fails in its own words (what failed may be no size at all, but a value).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel
from sqlalchemy.orm import Session, sessionmaker

from optistudio.core.data.input_profile import InputProfile
from optistudio.core.data.probe import check_needed, check_profile
from optistudio.core.errors import InvalidSpec
from optistudio.core.llm.folder import is_decoder_file
from optistudio.db.models import Job, Model
from optistudio.db.queries import (
    MeasurementRow,
    get_or_create_environment,
    replace_measurements,
    set_job_result,
    set_job_spec,
)
from optistudio.db.session import rerun_if_lost
from optistudio.services.input_profiles import apply_input_profile, profile_of, save_profile
from optistudio.services.jobkinds import JobKindInfo
from optistudio.services.model_tasks import with_task
from optistudio.workers.artifacts import JobModel, read_model
from optistudio.workers.jobs import JobContext

log = logging.getLogger(__name__)
SpecT = TypeVar("SpecT", bound=BaseModel)
ResultT = TypeVar("ResultT", bound=BaseModel)


@dataclass(frozen=True)
class Done(Generic[ResultT]):
    """What a job's work gave: stored on its row by `JobWork`."""

    message: str
    result: ResultT
    environment: dict[str, Any] | None = None
    measurements: list[MeasurementRow] | None = None


@dataclass(frozen=True)
class JobWork(Generic[SpecT, ResultT]):
    """A kind's work function as `run_job` calls it: `(job, context) -> (message, env id)`."""

    info: JobKindInfo[SpecT, ResultT]
    run: Callable[[Job, SpecT, JobContext], Done[ResultT]]

    def __call__(self, job: Job, context: JobContext) -> tuple[str, int | None]:
        spec = with_input_profile(context.factory, job, self.info.parse_spec(job.spec or {}))
        done = self.run(job, spec, context)
        return done.message, store(context.factory, job.id, self.info, done)


@dataclass(frozen=True)
class ModelWork(Generic[SpecT, ResultT]):
    """A kind whose work takes the job's model as the worker read it once (`JobModel`: its
    card and its file), so nothing it calls reads them again; a job without a model fails
    with InvalidSpec, once its spec has parsed."""

    info: JobKindInfo[SpecT, ResultT]
    run: Callable[[Job, SpecT, JobModel, JobContext], Done[ResultT]]

    def __call__(self, job: Job, context: JobContext) -> tuple[str, int | None]:
        spec = self.info.parse_spec(job.spec or {})
        model = read_model(job)
        done = self.run(job, with_input_profile(context.factory, job, spec, model), model, context)
        return done.message, store(context.factory, job.id, self.info, done)


def with_input_profile(
    factory: sessionmaker[Session], job: Job, spec: SpecT, model: JobModel | None = None
) -> SpecT:
    """The job's spec with its model's input profile under the job's own input settings, and
    the task set on the model's card where the job leaves it open, as the row then records (a
    redelivered job gets the same: its own settings win). `model` is the job's as the worker
    read it (None: read here, once)."""
    if job.model is None:
        return spec
    model = model or read_model(job)
    checked_first(factory, job, model, spec)

    def feed(s: Session) -> SpecT:
        row = s.get(Model, model.row.id)
        fed = (
            with_task(s, row, apply_input_profile(s, row, spec, model.info))
            if row is not None
            else spec
        )
        if fed is not spec:
            set_job_spec(s, job_id=job.id, spec=fed.model_dump(mode="json"))
        return fed

    return rerun_if_lost(factory, feed)


def checked_first(
    factory: sessionmaker[Session], job: Job, model: JobModel, spec: BaseModel
) -> None:
    """Check the job's model's stored profile by a run when it needs it (`check_needed`), out
    of any transaction, and store the profile that ran. When no candidate runs the profile is
    left as it is and the job runs at it, so its failure is recorded in its own words."""

    def stored_profile(s: Session) -> InputProfile | None:
        row = s.get(Model, model.row.id)
        return profile_of(s, row) if row is not None else None

    profile = rerun_if_lost(factory, stored_profile)
    if profile is None:
        return
    if not check_needed(profile, model.info.inputs, spec):
        return
    if is_decoder_file(model.path):  # fed token ids and its own cache by the decode loop, not sizes
        return
    try:
        check = check_profile(model.path, model.info, profile)
    except InvalidSpec as exc:  # maybe not the sizes (a value): the job's own run says what
        log.warning("job %s: the stored input profile did not run: %s", job.id, exc.message)
        return
    if check.checked:
        save_profile(factory, model.row.id, check.profile)


def store(
    factory: sessionmaker[Session], job_id: int, info: JobKindInfo[Any, Any], done: Done[Any]
) -> int | None:
    """Write a job's outcome in one transaction (again, should the connection be lost in the
    middle: every write replaces); returns its environment's id (None if none)."""

    def write(s: Session) -> int | None:
        environment = (
            get_or_create_environment(s, data=done.environment)
            if done.environment is not None
            else None
        )
        if done.measurements is not None:
            replace_measurements(s, job_id=job_id, rows=done.measurements)
        set_job_result(s, job_id=job_id, result=info.dump_result(done.result))
        return environment.id if environment is not None else None

    return rerun_if_lost(factory, write)
