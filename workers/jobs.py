"""The life of a job on a worker: claim the row, run the work, record the outcome.

Expected failures (optistudio.core.errors.OptistudioError) end the job as failed with their user message and
the worker carries on. Anything else is a bug: the job says "internal error (job N)", the
traceback is kept in the row and the log, and the exception is re-raised.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from celery.exceptions import Reject, SoftTimeLimitExceeded
from sqlalchemy.orm import Session, sessionmaker

from optistudio.core.backends.blame import REFERENCE, made_by_studio, passes_of
from optistudio.core.errors import (
    Cancelled,
    ErrorCode,
    ErrorInfo,
    OptistudioError,
    TimedOut,
    first_line,
)
from optistudio.db.models import Job, JobStatus
from optistudio.db.queries import claim_job, finish_job, set_progress
from optistudio.db.session import DatabaseUnavailable, is_unavailable, rerun_if_lost, transaction
from optistudio.services.job_errors import error_columns

log = logging.getLogger(__name__)

PROGRESS_INTERVAL_S = 0.25
OUTCOME_RETRY_S = 60.0
"""How long a finished job keeps trying to record its outcome while the database is away."""


@dataclass
class JobContext:
    """Handed to the work function: the job id and a throttled, cancel-aware progress call."""

    job_id: int
    factory: sessionmaker[Session]
    _last_write: float = field(default=0.0)

    def progress(self, fraction: float, message: str) -> None:
        """Record progress (at most every PROGRESS_INTERVAL_S); raise Cancelled if asked to."""
        now = time.monotonic()
        if now - self._last_write < PROGRESS_INTERVAL_S and fraction < 1.0:
            return
        self._last_write = now
        cancel_requested = rerun_if_lost(
            self.factory,
            lambda s: set_progress(s, job_id=self.job_id, progress=fraction, message=message),
        )
        if cancel_requested:
            raise Cancelled("Cancelled while running.")


Work = Callable[[Job, JobContext], tuple[str, int | None]]
"""Runs a claimed job; returns (success message, environment id). It writes its own results."""


def run_job(
    factory: sessionmaker[Session], job_id: int, *, worker: str, task_id: str | None, work: Work
) -> None:
    try:
        with transaction(factory) as s:
            job = claim_job(s, job_id=job_id, worker=worker, task_id=task_id)
            if job is not None:
                _ = job.model  # loaded now: the work runs after this session closes
    except DatabaseUnavailable as exc:
        log.warning("job %s: could not claim it (%s); handing it back to the broker", job_id, exc)
        raise Reject(str(exc), requeue=True) from exc
    if job is None:
        log.info("job %s is finished or cancelled; nothing to do", job_id)
        return
    context = JobContext(job_id=job_id, factory=factory)
    try:
        message, environment_id = work(job, context)
    except Cancelled as exc:
        _finish(factory, job_id, JobStatus.cancelled, exc.info())
    except SoftTimeLimitExceeded:
        log.warning("job %s ran past its time limit", job_id)
        _finish(factory, job_id, JobStatus.timed_out, _timed_out())
    except OptistudioError as exc:
        log.info("job %s failed: %s", job_id, exc)
        _finish(factory, job_id, JobStatus.failed, blamed(job, exc).info())
    except Exception as exc:
        if is_unavailable(exc):
            log.warning("job %s: database unavailable: %s", job_id, exc)
            _finish(factory, job_id, JobStatus.failed, _database_lost(exc))
            return
        log.exception("internal error in job %s", job_id)
        _finish(factory, job_id, JobStatus.failed, _internal_error(job_id))
        raise
    else:
        _finish(factory, job_id, JobStatus.succeeded, message, environment_id=environment_id)


def blamed(job: Job, exc: OptistudioError) -> OptistudioError:
    """A variant's file (the studio made it) failing blames its pass (core.backends.blame)."""
    model = job.model
    if model is None or model.parent_id is None:
        return exc
    backend = str((job.spec or {}).get("backend") or REFERENCE)
    return made_by_studio(
        exc, precision=model.precision, passes=passes_of(model.recipe), backend=backend
    )


def _finish(
    factory: sessionmaker[Session],
    job_id: int,
    status: JobStatus,
    outcome: str | ErrorInfo,
    *,
    environment_id: int | None = None,
) -> None:
    """Record the outcome: a success message, or an error's code, message, hint and detail."""
    columns = error_columns(outcome) if isinstance(outcome, ErrorInfo) else {"message": outcome}
    try:
        with transaction(factory, retry_s=OUTCOME_RETRY_S) as s:
            finish_job(s, job_id=job_id, status=status, environment_id=environment_id, **columns)
    except Exception as exc:
        if not is_unavailable(exc):
            raise
        # Left running without a worker vouching for it: heartbeat recovery takes it over.
        log.error("job %s: could not record %s (%s)", job_id, status.value, exc)


def _timed_out() -> ErrorInfo:
    return TimedOut(
        "Timed out: the job ran past its time limit and was stopped.",
        hint="Make the run shorter (fewer batch sizes, a lower max_seconds), or raise "
        "OPTISTUDIO_JOB_TIME_LIMIT_S on the workers.",
    ).info()


def _database_lost(exc: BaseException) -> ErrorInfo:
    """A job stopped because the database went away (`exc` is_unavailable)."""
    if isinstance(exc, DatabaseUnavailable):
        message = first_line(exc)
    else:
        message = f"The database connection was lost ({first_line(exc)})."
    return ErrorInfo(
        code=ErrorCode.database_unavailable,
        message=f"{message} The job was stopped.",
        hint="Submit it again once the database is back.",
    )


def _internal_error(job_id: int) -> ErrorInfo:
    """A bug: a plain message, the traceback of the exception being handled kept as detail."""
    return ErrorInfo(
        code=ErrorCode.internal,
        message=f"Internal error (job {job_id}). The details are in the worker log.",
        hint="This is a bug in Optistudio; please report it with the worker log.",
        detail=traceback.format_exc(),
    )
