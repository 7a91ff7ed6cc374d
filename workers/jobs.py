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
from optistudio.core.errors import Cancelled, OptistudioError
from optistudio.db.models import Job, JobStatus
from optistudio.db.queries import claim_job, finish_job, set_progress
from optistudio.db.session import DatabaseUnavailable, is_unavailable, transaction
from sqlalchemy.orm import Session, sessionmaker

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
        try:
            cancel_requested = self._write(fraction, message)
        except Exception as exc:
            if isinstance(exc, DatabaseUnavailable) or not is_unavailable(exc):
                raise
            # The connection died mid-write; the write is idempotent, so wait and write again.
            cancel_requested = self._write(fraction, message)
        if cancel_requested:
            raise Cancelled("Cancelled while running.")

    def _write(self, fraction: float, message: str) -> bool:
        with transaction(self.factory) as s:
            return set_progress(s, job_id=self.job_id, progress=fraction, message=message)


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
        _finish(factory, job_id, JobStatus.cancelled, exc.message)
    except SoftTimeLimitExceeded:
        _finish(factory, job_id, JobStatus.failed, "Timed out: the job ran past its time limit.")
    except OptistudioError as exc:
        log.info("job %s failed: %s", job_id, exc)
        _finish(factory, job_id, JobStatus.failed, str(exc))
    except Exception as exc:
        if is_unavailable(exc):
            log.warning("job %s: database unavailable: %s", job_id, exc)
            message = f"{_first_line(exc)} The job was stopped; submit it again."
            _finish(factory, job_id, JobStatus.failed, message)
            return
        log.exception("internal error in job %s", job_id)
        message = f"Internal error (job {job_id}). The details are in the worker log."
        _finish(factory, job_id, JobStatus.failed, message, traceback.format_exc())
        raise
    else:
        _finish(factory, job_id, JobStatus.succeeded, message, environment_id=environment_id)


def _finish(
    factory: sessionmaker[Session],
    job_id: int,
    status: JobStatus,
    message: str,
    error_detail: str | None = None,
    *,
    environment_id: int | None = None,
) -> None:
    try:
        with transaction(factory, retry_s=OUTCOME_RETRY_S) as s:
            finish_job(
                s,
                job_id=job_id,
                status=status,
                message=message,
                error_detail=error_detail,
                environment_id=environment_id,
            )
    except Exception as exc:
        if not is_unavailable(exc):
            raise
        # Left running without a worker vouching for it: heartbeat recovery takes it over.
        log.error("job %s: could not record %s (%s)", job_id, status.value, exc)


def _first_line(exc: BaseException) -> str:
    if isinstance(exc, DatabaseUnavailable):
        return str(exc)
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return f"The database connection was lost ({text[0] if text else type(exc).__name__})."
