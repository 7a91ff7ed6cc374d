"""Jobs as the studio handles them: commit a row, send its id by task name, list and cancel.

The studio never runs a model: it commits job rows and sends tasks by name. Every page sends a
job through `submit` (make the spec, route it to a live worker, commit, send; a refusal is a
value, drawn by `optistudio.studio.submitting`). Every page reads a job as the one frozen
`JobView` that `job_view` makes from its row (the Jobs page lists them, `job_rows`; the other
pages read them with the job's typed result, `recent_jobs`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, overload

from pydantic import BaseModel, ValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session, joinedload, sessionmaker

from optistudio.core.errors import (
    ErrorCode,
    ErrorInfo,
    OptistudioError,
    describe_validation_error,
)
from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.db.models import Job, JobKind, JobStatus, Model
from optistudio.db.queries import (
    create_job,
    finish_job,
    get_job,
    list_jobs,
    live_workers,
    request_cancel,
    set_task_id,
    unfinished_jobs,
)
from optistudio.db.session import transaction
from optistudio.services.job_errors import error_columns
from optistudio.services.jobkinds import JOB_KINDS, CompareJobSpec, JobKindInfo, SpecT
from optistudio.services.jobkinds import ResultT as KindResultT
from optistudio.studio.job_status import QueueState, RunningJob
from optistudio.studio.job_view import JobView, ResultT

log = logging.getLogger(__name__)

SendTask = Callable[[str, list[Any]], str]
"""Sends a task by name with its arguments; returns the broker's task id."""

Route = Callable[[JobKindInfo[Any, Any], Any], str]
"""The queue for a job of a kind with its spec (the studio's `state.route_job`)."""

SenderTo = Callable[[str], SendTask]
"""The `SendTask` that sends to a queue (the studio's `state.sender`)."""

BROKER_DOWN = ErrorInfo(
    code=ErrorCode.broker_unavailable,
    message="Could not reach the job queue, so the job was not started.",
    hint="Is the worker stack running? Start it with `make up` (or `optistudio up`).",
)


def submit_job(
    factory: sessionmaker[Session],
    *,
    kind: JobKind,
    model_id: int,
    spec: BaseModel,
    send: SendTask,
) -> int:
    """Commit the job row first, then send only its id; a broker that is down fails the job."""
    info = JOB_KINDS[kind]
    with transaction(factory) as s:
        job_id = create_job(s, kind=kind, spec=info.dump_spec(spec), model_id=model_id).id
    try:
        task_id = send(info.task_name, [job_id])
    except Exception:
        log.exception("could not send job %s to the broker", job_id)
        with transaction(factory) as s:
            finish_job(s, job_id=job_id, status=JobStatus.failed, **error_columns(BROKER_DOWN))
        return job_id
    with transaction(factory) as s:
        set_task_id(s, job_id=job_id, task_id=task_id)
    return job_id


class BadSetting(ValueError):
    """A form's value that makes no setting ("batch sizes must be integers separated by
    commas, got 'x'"): the person's to correct, refused like a spec that does not validate."""


@dataclass(frozen=True)
class Submitted(Generic[SpecT]):
    """A job committed and sent: its id and the spec it runs."""

    job_id: int
    spec: SpecT


@dataclass(frozen=True)
class Refused:
    """A job not sent, and why: `settings` when the form's values make no valid spec (what is
    wrong with them), else `error`, the expected failure that refused it (no live worker
    offers its target, data that does not fit the model)."""

    settings: str | None = None
    error: OptistudioError | None = None

    def check(self, what: str = "") -> str:
        """The sentence for bad settings: 'Check the `what` settings: ...'."""
        named = f"{what} " if what else ""
        return f"Check the {named}settings: {self.settings}"


def submit(
    factory: sessionmaker[Session],
    kind: JobKindInfo[SpecT, Any],
    model_id: int,
    make_spec: Callable[[], SpecT],
    *,
    route: Route,
    sender: SenderTo,
) -> Submitted[SpecT] | Refused:
    """The one way a page sends a job: make its spec, route it to a live worker's queue,
    commit the row and send its id (`submit_job`). Settings that do not validate (pydantic's
    ValidationError or `BadSetting` from `make_spec`) and an `OptistudioError` from making or
    routing the spec come back as a `Refused`; anything else is a bug and is raised."""
    try:
        spec = make_spec()
        queue = route(kind, spec)
    except ValidationError as exc:
        return Refused(settings=describe_validation_error(exc))
    except BadSetting as exc:
        return Refused(settings=str(exc))
    except OptistudioError as exc:
        return Refused(error=exc)
    job_id = submit_job(factory, kind=kind.kind, model_id=model_id, spec=spec, send=sender(queue))
    return Submitted(job_id, spec)


def submit_benchmark(
    factory: sessionmaker[Session], *, model_id: int, spec: BenchmarkSpec, send: SendTask
) -> int:
    """Commit a benchmark job, then send its id to the workers; returns the job id."""
    return submit_job(factory, kind=JobKind.benchmark, model_id=model_id, spec=spec, send=send)


def submit_comparison(
    factory: sessionmaker[Session], *, spec: CompareJobSpec, baseline_id: int, send: SendTask
) -> int:
    """Commit an interleaved A/B comparison job (A = baseline), then send it."""
    return submit_job(factory, kind=JobKind.compare, model_id=baseline_id, spec=spec, send=send)


def cancel_job(
    factory: sessionmaker[Session], *, job_id: int, revoke: Callable[[str], None]
) -> str:
    """Cancel a queued job at once, or ask a running one to stop; returns what happened."""
    with transaction(factory) as s:
        before = get_job(s, job_id=job_id)
        if before is None:
            return f"Job {job_id} does not exist."
        if before.is_terminal:
            return f"Job {job_id} had already finished ({before.status.value})."
        job = request_cancel(s, job_id=job_id)
        assert job is not None
        status, task_id = job.status, job.celery_task_id
    if status == JobStatus.cancelled and task_id:
        revoke(task_id)  # a queued message is dropped by the worker instead of claimed
    if status == JobStatus.cancelled:
        return f"Job {job_id} is cancelled."
    return f"Job {job_id} will stop at its next checkpoint."


def job_spec(factory: sessionmaker[Session], *, job_id: int) -> dict[str, Any]:
    """The stored spec of a job ({} when the job is gone)."""
    with transaction(factory, read_only=True) as s:
        job = get_job(s, job_id=job_id)
        return dict(job.spec) if job is not None else {}


def data_version(factory: sessionmaker[Session]) -> tuple[Any, ...]:
    """A stamp of what the pages list, from one cheap query: the jobs' count, newest id, latest
    start and finish, and the models' count and newest id. It changes when a job is submitted,
    starts or ends and when a model is added or removed, so a read cached under it is fresh."""
    with transaction(factory, read_only=True) as s:
        jobs = s.execute(
            select(
                func.count(Job.id),
                func.max(Job.id),
                func.max(Job.started_at),
                func.max(Job.finished_at),
            )
        ).one()
        models = s.execute(select(func.count(Model.id), func.max(Model.id))).one()
    return (*jobs, *models)


def jobs_of(
    s: Session,
    *,
    kind: JobKind,
    model_id: int | None = None,
    status: JobStatus | None = None,
    limit: int = 20,
) -> list[Job]:
    """The newest `limit` jobs of `kind` (of one model, in one status, when given), with their
    model loaded: filtered in the query, so a page reads only the rows it shows.

    (A query function that belongs with `optistudio.db.queries.finished_jobs`, which filters
    by kind only; kept here until db grows its model filter.) A row stored under a former name
    of the kind (`JobKind.stored_names`) is one of its jobs."""
    query = select(Job).options(joinedload(Job.model)).where(Job.kind.in_(kind.stored_names()))
    if model_id is not None:
        query = query.where(Job.model_id == model_id)
    if status is not None:
        query = query.where(Job.status == status)
    return list(s.scalars(query.order_by(Job.id.desc()).limit(limit)))


def finished_of(
    s: Session, *, kind: JobKind, model_id: int | None = None, limit: int = 50
) -> list[Job]:
    """Succeeded jobs of `kind` (of one model when given), newest first."""
    return jobs_of(s, kind=kind, model_id=model_id, status=JobStatus.succeeded, limit=limit)


def job_view(job: Job, result: ResultT | None = None) -> JobView[ResultT]:
    """A job as every page reads it (`JobView`): its id, kind (its label), model, status,
    progress, message and error fields, whether a cancel was asked, its times, worker,
    attempts and spec, with `result` when the page reads one."""
    return JobView(
        id=job.id,
        kind=JOB_KINDS[job.kind].label,
        status=job.status.value,
        model=job.model.name if job.model else "",
        model_id=job.model_id,
        progress=float(job.progress or 0.0),
        message=job.message or "",
        error_code=job.error_code,
        error_hint=job.error_hint,
        cancel_requested=bool(job.cancel_requested),
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        worker=job.worker or "",
        attempts=job.attempts,
        spec=dict(job.spec or {}),
        result=result,
    )


def job_rows(factory: sessionmaker[Session], *, limit: int = 200) -> list[JobView[None]]:
    """The newest `limit` jobs of every kind, as `job_view`s without their results (the Jobs
    page)."""
    with transaction(factory, read_only=True) as s:
        return [job_view(job) for job in list_jobs(s, limit=limit)]


@overload
def recent_jobs(
    factory: sessionmaker[Session],
    *,
    kind: JobKindInfo[Any, KindResultT],
    model_id: int | None = None,
    limit: int = 20,
) -> list[JobView[KindResultT]]: ...


@overload
def recent_jobs(
    factory: sessionmaker[Session], *, kind: JobKind, model_id: int | None = None, limit: int = 20
) -> list[JobView[Any]]: ...


def recent_jobs(
    factory: sessionmaker[Session],
    *,
    kind: JobKind | JobKindInfo[Any, Any],
    model_id: int | None = None,
    limit: int = 20,
) -> list[JobView[Any]]:
    """Recent jobs of `kind` (any status), newest first: each `job_view` with its result (the
    kind's result model, typed as the kind's when `kind` is its `JobKindInfo`; None while it
    has none, or if it no longer reads)."""
    info = kind if isinstance(kind, JobKindInfo) else JOB_KINDS[kind]
    with transaction(factory, read_only=True) as s:
        return [
            job_view(job, info.read_result(job.result))
            for job in jobs_of(s, kind=info.kind, model_id=model_id, limit=limit)
        ]


def queue_state(factory: sessionmaker[Session], *, max_age_s: float) -> QueueState:
    """The queue now: the live workers (heartbeat at most `max_age_s` old, as on the Hardware
    page), the running jobs with their worker and start, the queued job ids, oldest first."""
    with transaction(factory, read_only=True) as s:
        live = tuple(w.hostname for w in live_workers(s, max_age_s=max_age_s))
        jobs = unfinished_jobs(s)
        running = tuple(
            RunningJob(j.id, j.worker or "", j.started_at)
            for j in jobs
            if j.status is JobStatus.running
        )
        queued = tuple(j.id for j in jobs if j.status is JobStatus.queued)
    return QueueState(live_workers=live, running=running, queued=queued)
