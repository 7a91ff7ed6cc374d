"""Keyword-only query functions.

None of them commits: the caller's ``transaction(...)`` does. They may flush, so ids are set.
Missing rows are ``None`` from getters and ``LookupError`` from functions that must act on a row.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import String, cast, delete, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, joinedload

from optistudio.db.models import (
    TERMINAL,
    Environment,
    Job,
    JobKind,
    JobStatus,
    Measurement,
    Model,
    WorkerRecord,
)

RowT = TypeVar("RowT", Model, Environment)

CODE_CANCELLED = "cancelled"
CODE_WORKER_LOST = "worker_lost"
"""The error codes this module writes itself: values of optistudio.core.errors.ErrorCode, which
db may not import (tests/db/test_queries.py keeps them in step)."""


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _insert_or_fetch(s: Session, row: RowT, fetch: Callable[[], RowT | None]) -> tuple[RowT, bool]:
    """Return ``(existing, False)`` or ``(row, True)``; a concurrent insert of the same key wins."""
    found = fetch()
    if found is not None:
        return found, False
    try:
        with s.begin_nested():
            s.add(row)
    except IntegrityError:
        found = fetch()
        if found is None:
            raise
        return found, False
    return row, True


# -- models ---------------------------------------------------------------------------------


def get_or_create_model(
    s: Session,
    *,
    sha256: str,
    name: str,
    filename: str,
    path: str,
    size_bytes: int,
    info: dict[str, Any],
    source: str = "upload",
    parent_id: int | None = None,
    recipe: dict[str, Any] | None = None,
    precision: str = "fp32",
) -> tuple[Model, bool]:
    """The model with this content hash, creating it if new; the flag says it was created."""
    row = Model(
        sha256=sha256,
        name=name,
        filename=filename,
        path=path,
        size_bytes=size_bytes,
        info=info,
        source=source,
        parent_id=parent_id,
        recipe=recipe,
        precision=precision,
    )
    return _insert_or_fetch(s, row, lambda: _model_by_sha256(s, sha256))


def _model_by_sha256(s: Session, sha256: str) -> Model | None:
    """The file's model run as it is (backend ''): the oldest, when a variant stored the same
    bytes at another precision first."""
    query = select(Model).where(Model.sha256 == sha256, Model.backend == "").order_by(Model.id)
    return s.scalars(query.limit(1)).first()


def get_or_create_backend_variant(
    s: Session,
    *,
    sha256: str,
    backend: str,
    precision: str,
    threads: int | None,
    name: str,
    filename: str,
    path: str,
    size_bytes: int,
    info: dict[str, Any],
    parent_id: int,
    recipe: dict[str, Any],
) -> tuple[Model, bool]:
    """The variant that runs this file on `backend` at `precision` (BF16 on OpenVINO of the
    original's bytes), creating it if new: a model of its own, pointing at the same stored
    file; the flag says it was created."""
    row = Model(
        sha256=sha256,
        name=name,
        filename=filename,
        path=path,
        size_bytes=size_bytes,
        info=info,
        source="variant",
        parent_id=parent_id,
        recipe=recipe,
        precision=precision,
        backend=backend,
        threads=threads,
    )
    return _insert_or_fetch(s, row, lambda: _run_of(s, sha256, backend, precision))


def _run_of(s: Session, sha256: str, backend: str, precision: str) -> Model | None:
    query = select(Model).where(
        Model.sha256 == sha256, Model.backend == backend, Model.precision == precision
    )
    return s.scalars(query).one_or_none()


def get_model(s: Session, *, model_id: int) -> Model | None:
    """The model with this id, or None."""
    return s.get(Model, model_id)


def original_of(s: Session, model: Model) -> Model:
    """The upload or sample a variant was made from (following parents); itself for those."""
    seen = {model.id}
    while model.parent_id is not None and model.parent_id not in seen:
        parent = s.get(Model, model.parent_id)
        if parent is None:
            break
        seen.add(parent.id)
        model = parent
    return model


def set_input_profile(s: Session, *, model_id: int, profile: dict[str, Any]) -> None:
    """Store a model's input profile (as JSON)."""
    model = s.get(Model, model_id)
    if model is None:
        raise LookupError(f"model {model_id} does not exist")
    model.input_profile = profile


def set_model_task(s: Session, *, model_id: int, task: str | None) -> None:
    """Store the task the user set on a model's card (None: recognize it)."""
    model = s.get(Model, model_id)
    if model is None:
        raise LookupError(f"model {model_id} does not exist")
    model.task = task


def set_job_spec(s: Session, *, job_id: int, spec: dict[str, Any]) -> None:
    """Record the settings a job really ran with (its own, with the model's profile under)."""
    job = s.get(Job, job_id)
    if job is not None:
        job.spec = spec


def list_models(s: Session) -> list[Model]:
    """All models, newest first."""
    return list(s.scalars(select(Model).order_by(Model.id.desc())))


# -- environments ---------------------------------------------------------------------------


def environment_fingerprint(data: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of ``data`` (sorted keys, no spaces)."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def get_or_create_environment(s: Session, *, data: dict[str, Any]) -> Environment:
    """The environment row for ``data``, deduplicated by fingerprint."""
    fingerprint = environment_fingerprint(data)
    row = Environment(fingerprint=fingerprint, data=data)
    env, _ = _insert_or_fetch(s, row, lambda: _environment_by_fingerprint(s, fingerprint))
    return env


def _environment_by_fingerprint(s: Session, fingerprint: str) -> Environment | None:
    query = select(Environment).where(Environment.fingerprint == fingerprint)
    return s.scalars(query).one_or_none()


def get_environment(s: Session, *, environment_id: int) -> Environment | None:
    """The environment with this id, or None."""
    return s.get(Environment, environment_id)


# -- jobs -----------------------------------------------------------------------------------


def create_job(s: Session, *, kind: JobKind, spec: dict[str, Any], model_id: int | None) -> Job:
    """A new queued job, flushed so its id is set (enqueue only after the commit)."""
    job = Job(kind=kind, spec=spec, model_id=model_id, status=JobStatus.queued)
    s.add(job)
    s.flush()
    return job


def get_job(s: Session, *, job_id: int) -> Job | None:
    """The job with this id, or None."""
    return s.get(Job, job_id)


def get_job_for_update(s: Session, *, job_id: int) -> Job | None:
    """The job with this id, read afresh and locked until the transaction ends; or None."""
    return s.get(Job, job_id, with_for_update=True, populate_existing=True)


def list_jobs(s: Session, *, limit: int = 200) -> list[Job]:
    """The latest ``limit`` jobs, newest first, with their model loaded."""
    query = select(Job).options(joinedload(Job.model)).order_by(Job.id.desc()).limit(limit)
    return list(s.scalars(query))


def unfinished_jobs(s: Session) -> list[Job]:
    """Every queued or running job, oldest first: the queue as the workers see it."""
    query = (
        select(Job).where(Job.status.in_([JobStatus.queued, JobStatus.running])).order_by(Job.id)
    )
    return list(s.scalars(query))


def _job_for_update(s: Session, job_id: int) -> Job:
    job = s.get(Job, job_id, with_for_update=True, populate_existing=True)
    if job is None:
        raise LookupError(f"job {job_id} not found")
    return job


MAX_ATTEMPTS = 3
"""How many times a job is started before a worker death ends it as failed."""


def claim_job(
    s: Session,
    *,
    job_id: int,
    worker: str,
    task_id: str | None,
    max_attempts: int = MAX_ATTEMPTS,
) -> Job | None:
    """Mark the job running for this worker; None when there is nothing to run.

    A running job delivered again with the task id it runs under was redelivered after its
    worker process died: its attempts go up and progress restarts, up to ``max_attempts``
    starts, after which it ends as failed. A running job delivered under another task id is
    left alone: it was sent again after its worker stopped responding and that newer delivery
    carries it now. A pending cancel request is honoured here.
    """
    job = s.get(Job, job_id, with_for_update=True, populate_existing=True)
    if job is None or job.status in TERMINAL:
        return None
    if job.cancel_requested:
        _finish(job, JobStatus.cancelled, "Cancelled.", code=CODE_CANCELLED)
        return None
    if job.status is JobStatus.running:
        if task_id is not None and job.celery_task_id not in (None, task_id):
            return None
        if job.attempts >= max_attempts:
            _give_up(job)
            return None
    now = _utcnow()
    job.status = JobStatus.running
    job.started_at = job.heartbeat_at = now
    job.attempts += 1
    job.worker, job.celery_task_id = worker, task_id
    job.progress, job.message = 0.0, "Starting…"
    job.error_code = job.error_hint = job.error_detail = None
    s.flush()
    return job


def gave_up_message(attempts: int, worker: str | None) -> str:
    return (
        f"Failed after {attempts} attempts: the worker running it ({worker or 'unknown'}) "
        "died or stopped responding each time. It is not retried again."
    )


GAVE_UP_HINT = "If it happens with this model only, the model may crash the runtime."


def _give_up(job: Job) -> None:
    message = gave_up_message(job.attempts, job.worker)
    _finish(job, JobStatus.failed, message, code=CODE_WORKER_LOST, hint=GAVE_UP_HINT)


def touch_jobs(s: Session, *, job_ids: Iterable[int], worker: str) -> int:
    """Refresh the heartbeat of these running jobs of ``worker``; returns how many."""
    ids = list(job_ids)
    if not ids:
        return 0
    query = (
        update(Job)
        .where(Job.id.in_(ids), Job.worker == worker, Job.status == JobStatus.running)
        .values(heartbeat_at=_utcnow())
    )
    result: Any = s.execute(query)
    return int(result.rowcount or 0)


def stale_jobs(s: Session, *, max_age_s: float) -> list[Job]:
    """Running jobs nobody has vouched for in ``max_age_s`` seconds, locked for update.

    A job's heartbeat is refreshed by its progress and by its worker's heartbeat while the
    worker runs it, so a stale running job has lost its worker.
    """
    cutoff = _utcnow() - timedelta(seconds=max_age_s)
    query = (
        select(Job)
        .where(Job.status == JobStatus.running, Job.heartbeat_at < cutoff)
        .order_by(Job.id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    return list(s.scalars(query))


def requeue_job(s: Session, *, job: Job, task_id: str | None, message: str) -> None:
    """Put a job back in the queue under a new task id (None: not sent yet, no worker runs).

    Its heartbeat becomes the time it was queued again, which ``waiting_jobs`` reads."""
    job.status = JobStatus.queued
    job.celery_task_id = task_id
    job.progress, job.message = 0.0, message
    job.heartbeat_at = _utcnow()
    s.flush()


def end_lost_job(s: Session, *, job: Job, max_attempts: int = MAX_ATTEMPTS) -> JobStatus | None:
    """End a job that lost its worker when it must not run again: a cancel was pending, or it
    was started ``max_attempts`` times. Returns the terminal status, or None (run it again)."""
    if job.cancel_requested:
        message = f"Cancelled (its worker {job.worker or 'unknown'} had stopped responding)."
        _finish(job, JobStatus.cancelled, message, code=CODE_CANCELLED)
    elif job.attempts >= max_attempts:
        _give_up(job)
    else:
        return None
    s.flush()
    return job.status


WORKER_LOST = "Worker lost"
"""How the message of a job queued again by ``release_orphaned_jobs`` starts."""


def worker_lost_message(job: Job, max_attempts: int = MAX_ATTEMPTS) -> str:
    return (
        f"{WORKER_LOST}: its worker ({job.worker or 'unknown'}) stopped responding and no worker "
        f"is running. Attempt {job.attempts + 1} of {max_attempts} will start when a worker "
        "starts."
    )


def release_orphaned_jobs(
    s: Session, *, max_age_s: float, max_attempts: int = MAX_ATTEMPTS
) -> list[tuple[int, str]]:
    """While no worker is live, take running jobs nobody vouches for off "running".

    Workers recover such jobs on their heartbeat; with every worker down nobody would, and the
    job would show "running" until one starts. Here (callable by the studio and the CLI) each
    is ended when it must not run again (``end_lost_job``), otherwise queued with no task id and
    a message saying it waits for a worker; the first worker to start sends it
    (``waiting_jobs``). Returns (job id, new status) for each job changed.
    """
    if live_workers(s, max_age_s=max_age_s):
        return []
    changed = []
    for job in stale_jobs(s, max_age_s=max_age_s):
        ended = end_lost_job(s, job=job, max_attempts=max_attempts)
        if ended is None:
            requeue_job(s, job=job, task_id=None, message=worker_lost_message(job, max_attempts))
        changed.append((job.id, (ended or JobStatus.queued).value))
    return changed


def waiting_jobs(s: Session, *, queued_for_s: float) -> list[Job]:
    """Queued jobs queued (or queued again) at least ``queued_for_s`` seconds ago, oldest first.

    The ones whose task id the broker does not hold were lost by it (or never sent, after
    ``release_orphaned_jobs``) and must be sent again."""
    cutoff = _utcnow() - timedelta(seconds=queued_for_s)
    queued_since = func.coalesce(Job.heartbeat_at, Job.created_at)
    query = (
        select(Job).where(Job.status == JobStatus.queued, queued_since < cutoff).order_by(Job.id)
    )
    return list(s.scalars(query))


def set_progress(s: Session, *, job_id: int, progress: float, message: str) -> bool:
    """Record progress (clamped to 0..1) and a heartbeat; returns whether a cancel is pending."""
    query = (
        update(Job)
        .where(Job.id == job_id)
        .values(progress=min(max(progress, 0.0), 1.0), message=message, heartbeat_at=_utcnow())
        .returning(Job.cancel_requested)
    )
    cancel_requested = s.execute(query).scalar_one_or_none()
    if cancel_requested is None:
        raise LookupError(f"job {job_id} not found")
    return cancel_requested


def finish_job(
    s: Session,
    *,
    job_id: int,
    status: JobStatus,
    message: str = "",
    error_code: str | None = None,
    error_hint: str | None = None,
    error_detail: str | None = None,
    environment_id: int | None = None,
) -> None:
    """Put the job in a terminal state with its message, and an error's code and hint apart.

    ``error_detail`` (a traceback) is never shown in the UI."""
    if status not in TERMINAL:
        raise ValueError(f"finish_job needs a terminal status, got {status.value!r}")
    job = _job_for_update(s, job_id)
    _finish(job, status, message, code=error_code, hint=error_hint, detail=error_detail)
    if environment_id is not None:
        job.environment_id = environment_id
    s.flush()


def _finish(
    job: Job,
    status: JobStatus,
    message: str,
    *,
    code: str | None = None,
    hint: str | None = None,
    detail: str | None = None,
) -> None:
    job.status = status
    job.message = message
    job.error_code, job.error_hint, job.error_detail = code, hint, detail
    job.finished_at = _utcnow()
    if status is JobStatus.succeeded:
        job.progress = 1.0


def request_cancel(s: Session, *, job_id: int) -> Job | None:
    """Cancel a queued job at once, ask a running one to stop; finished jobs stay as they are."""
    job = s.get(Job, job_id, with_for_update=True, populate_existing=True)
    if job is None:
        return None
    if job.status is JobStatus.queued:
        _finish(job, JobStatus.cancelled, "Cancelled before it started.", code=CODE_CANCELLED)
    elif job.status is JobStatus.running:
        job.cancel_requested = True
        job.message = "Cancelling…"
    s.flush()
    return job


def set_task_id(s: Session, *, job_id: int, task_id: str) -> None:
    """Remember the Celery task id that carries this job."""
    _job_for_update(s, job_id).celery_task_id = task_id
    s.flush()


def finished_jobs(s: Session, *, kind: JobKind, limit: int = 50) -> list[Job]:
    """Succeeded jobs of one kind, newest first, with their model loaded."""
    query = (
        select(Job)
        .options(joinedload(Job.model))
        .where(Job.kind.in_(kind.stored_names()), Job.status == JobStatus.succeeded)
        .order_by(Job.id.desc())
        .limit(limit)
    )
    return list(s.scalars(query))


def newest_succeeded(s: Session, *, kind: JobKind, model_id: int) -> Job | None:
    """The newest succeeded job of one kind on one model, or None."""
    query = (
        select(Job)
        .where(
            Job.kind.in_(kind.stored_names()),
            Job.status == JobStatus.succeeded,
            Job.model_id == model_id,
        )
        .order_by(Job.id.desc())
        .limit(1)
    )
    return s.scalars(query).first()


def finished_comparisons(s: Session, *, limit: int = 50) -> list[Job]:
    """Succeeded comparison jobs, newest first, with their baseline model loaded."""
    return finished_jobs(s, kind=JobKind.compare, limit=limit)


def set_job_result(s: Session, *, job_id: int, result: dict[str, Any]) -> None:
    """Store (or replace) the job's JSON result summary."""
    _job_for_update(s, job_id).result = result
    s.flush()


# -- measurements ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MeasurementRow:
    """One measured number, before it has a job."""

    backend: str
    batch_size: int
    threads: int
    metric: str
    value: float
    unit: str


def replace_measurements(s: Session, *, job_id: int, rows: Iterable[MeasurementRow]) -> int:
    """Replace the job's measurements with ``rows`` (idempotent for re-run jobs); returns count."""
    s.execute(delete(Measurement).where(Measurement.job_id == job_id))
    measurements = [
        Measurement(
            job_id=job_id,
            backend=r.backend,
            batch_size=r.batch_size,
            threads=r.threads,
            metric=r.metric,
            value=r.value,
            unit=r.unit,
        )
        for r in rows
    ]
    s.add_all(measurements)
    s.flush()
    return len(measurements)


def results_rows(
    s: Session, *, model_id: int | None = None, job_ids: list[int] | None = None
) -> list[dict[str, Any]]:
    """Measurements of succeeded jobs in long format, joined with job and model."""
    query = (
        select(
            Measurement.job_id,
            Job.model_id,
            Model.name.label("model_name"),
            Measurement.backend,
            Measurement.batch_size,
            Measurement.threads,
            Measurement.metric,
            Measurement.value,
            Measurement.unit,
            Job.finished_at,
            Job.environment_id,
        )
        .join(Job, Measurement.job_id == Job.id)
        .outerjoin(Model, Job.model_id == Model.id)
        .where(Job.status == JobStatus.succeeded)
        .order_by(Measurement.job_id, Measurement.id)
    )
    if model_id is not None:
        query = query.where(Job.model_id == model_id)
    if job_ids is not None:
        query = query.where(Measurement.job_id.in_(job_ids))
    return [dict(row._mapping) for row in s.execute(query)]


# -- workers --------------------------------------------------------------------------------


def record_worker(
    s: Session, *, hostname: str, queues: list[str], inventory: dict[str, Any]
) -> WorkerRecord:
    """Insert or refresh a worker's row (its heartbeat); a restarted worker starts anew."""
    now = _utcnow()
    row = s.scalars(select(WorkerRecord).where(WorkerRecord.hostname == hostname)).one_or_none()
    if row is None or row.stopped_at is not None:
        row = row or WorkerRecord(hostname=hostname)
        row.started_at, row.stopped_at = now, None
        s.add(row)
    row.queues, row.inventory, row.heartbeat_at = queues, inventory, now
    s.flush()
    return row


def stop_worker(s: Session, *, hostname: str) -> None:
    """Mark a worker as stopped (it shut down cleanly)."""
    s.execute(
        update(WorkerRecord).where(WorkerRecord.hostname == hostname).values(stopped_at=_utcnow())
    )


def list_workers(s: Session) -> list[WorkerRecord]:
    """Every worker ever seen, most recent heartbeat first."""
    return list(s.scalars(select(WorkerRecord).order_by(WorkerRecord.heartbeat_at.desc())))


def live_workers(s: Session, *, max_age_s: float) -> list[WorkerRecord]:
    """Workers not stopped whose heartbeat is at most `max_age_s` old."""
    cutoff = _utcnow() - timedelta(seconds=max_age_s)
    query = select(WorkerRecord).where(
        WorkerRecord.stopped_at.is_(None), WorkerRecord.heartbeat_at >= cutoff
    )
    return list(s.scalars(query.order_by(WorkerRecord.heartbeat_at.desc())))


def job_results(
    s: Session, *, job_ids: list[int]
) -> dict[int, tuple[dict[str, Any], dict[str, Any]]]:
    """(spec, result) of each of these jobs, by id: what the results table shows beside figures."""
    if not job_ids:
        return {}
    query = select(Job.id, Job.spec, Job.result).where(Job.id.in_(job_ids))
    return {row.id: (row.spec or {}, row.result or {}) for row in s.execute(query)}


# -- deleting -------------------------------------------------------------------------------


def model_lineage(s: Session, *, model_id: int) -> list[Model]:
    """The model and every variant made from it (variants of variants too), parents before
    their variants; [] when the model does not exist."""
    model = s.get(Model, model_id)
    if model is None:
        return []
    found, frontier, seen = [model], [model.id], {model.id}
    while frontier:
        children = list(s.scalars(select(Model).where(Model.parent_id.in_(frontier))))
        children = [child for child in children if child.id not in seen]
        seen.update(child.id for child in children)
        found.extend(children)
        frontier = [child.id for child in children]
    return found


def jobs_of_models(
    s: Session,
    *,
    model_ids: Iterable[int],
    spec_keys: Iterable[str] = (),
    for_update: bool = False,
) -> list[Job]:
    """Jobs run on these models, or naming one of them in their spec under one of `spec_keys`
    (a comparison's candidate, a profiled variant), oldest first; `for_update` locks them until
    the transaction ends, so no worker claims one meanwhile."""
    ids = list(model_ids)
    if not ids:
        return []
    named = [Job.spec[key].as_integer().in_(ids) for key in spec_keys]
    query = select(Job).where(or_(Job.model_id.in_(ids), *named)).order_by(Job.id)
    return _read_jobs(s, query, for_update=for_update)


def jobs_by_ids(s: Session, *, job_ids: Iterable[int], for_update: bool = False) -> list[Job]:
    """These jobs (those that exist), oldest first; `for_update` locks them as above."""
    query = select(Job).where(Job.id.in_(list(job_ids))).order_by(Job.id)
    return _read_jobs(s, query, for_update=for_update)


def _read_jobs(s: Session, query: Any, *, for_update: bool) -> list[Job]:
    if for_update:
        query = query.with_for_update().execution_options(populate_existing=True)
    return list(s.scalars(query))


def measurement_count(s: Session, *, job_ids: Iterable[int]) -> int:
    """How many measured numbers these jobs stored."""
    query = select(func.count(Measurement.id)).where(Measurement.job_id.in_(list(job_ids)))
    return int(s.scalar(query) or 0)


def jobs_mentioning(s: Session, *, text: str, excluding: Iterable[int] = ()) -> int:
    """How many jobs, `excluding` these, hold `text` anywhere in their spec (a stored data
    file's name: whether a file is still used)."""
    query = select(func.count(Job.id)).where(
        cast(Job.spec, String).contains(text, autoescape=True),
        Job.id.not_in(list(excluding)),
    )
    return int(s.scalar(query) or 0)


def existing_job_ids(s: Session, *, job_ids: Iterable[int]) -> set[int]:
    """Which of these job ids still have a row."""
    ids = list(job_ids)
    if not ids:
        return set()
    return set(s.scalars(select(Job.id).where(Job.id.in_(ids))))


def delete_jobs(s: Session, *, job_ids: Iterable[int]) -> int:
    """Delete these jobs and their measurements; returns how many jobs went. Files are the
    caller's to remove, after the commit."""
    ids = list(job_ids)
    if not ids:
        return 0
    s.execute(delete(Measurement).where(Measurement.job_id.in_(ids)))
    result: Any = s.execute(delete(Job).where(Job.id.in_(ids)))
    return int(result.rowcount or 0)


def delete_models(s: Session, *, model_ids: Iterable[int]) -> int:
    """Delete these models, each variant before the model it was made from; returns how many.

    Jobs on them must be gone first (``delete_jobs``), and so must variants outside the set:
    the foreign keys refuse otherwise."""
    remaining = set(model_ids)
    deleted = 0
    while remaining:
        parents = set(s.scalars(select(Model.parent_id).where(Model.id.in_(remaining)).distinct()))
        leaves = remaining - parents or remaining  # a cycle cannot be stored; never loop
        result: Any = s.execute(delete(Model).where(Model.id.in_(leaves)))
        deleted += int(result.rowcount or 0)
        remaining -= leaves
    return deleted
