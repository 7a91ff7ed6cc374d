"""Jobs whose worker was lost: found through the heartbeat, then run again or ended clearly.

Every worker's heartbeat thread (``optistudio.workers.inventory``) first refreshes the heartbeat of the jobs
its pool is running (Celery's active requests, kept in the worker's main process), then looks
for running jobs that nobody has vouched for in ``HEARTBEAT_STALE_FACTOR`` intervals. Such a
job lost its worker (SIGKILL, a crashed machine, a task that ended without recording its
outcome because the database was down). It is

- cancelled, if a cancel was asked for;
- failed with a message saying so, once it has been started ``MAX_ATTEMPTS`` times;
- failed with a message, when no live worker offers its target any more;
- otherwise sent again, under a new task id, to the queue of a live worker that offers its
  target. The old message, should the broker ever redeliver it, finds the job under another
  task id and does nothing (``optistudio.db.queries.claim_job``), so a job never runs twice at once.

A worker whose pool process dies (but whose main process lives) hands the task back to the
broker itself (``task_reject_on_worker_lost``); ``claim_job`` counts those attempts too.

With every worker down nobody beats; the studio and the CLI then take such jobs off "running"
themselves (``optistudio.db.queries.release_orphaned_jobs``): queued, unsent, "Worker lost…". Each beat
then also sends again every job queued for a while whose task the broker does not hold
(``resend_missing_jobs``): those, and jobs Redis lost when it was killed before its append-only
file reached the disk. The database, not the broker, is the list of jobs still to run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from optistudio.core.backends.inventory import pick_queue
from optistudio.core.errors import ErrorCode, ErrorInfo
from optistudio.db.models import Job, JobKind, JobStatus
from optistudio.db.queries import (
    MAX_ATTEMPTS,
    end_lost_job,
    finish_job,
    get_job_for_update,
    live_workers,
    requeue_job,
    stale_jobs,
    touch_jobs,
    waiting_jobs,
)
from optistudio.db.session import transaction
from optistudio.services.job_errors import error_columns
from optistudio.services.jobkinds import JOB_KINDS, Target
from optistudio.workers.app import app
from optistudio.workers.broker_contents import task_ids_in_broker

log = logging.getLogger(__name__)

SECOND_LOOK_S = 0.5
"""How long `resend_missing_jobs` waits before it looks at the broker again for a task it did
not find (a CI run, 2026-12-06: a worker that had just taken a message off the queue made a job
it then ran look lost, and the job was sent twice)."""


def task_of(kind: JobKind) -> str:
    """The task that runs a job kind (``optistudio.<kind>``, optistudio.services.jobkinds)."""
    return JOB_KINDS[kind].task_name


SendTo = Callable[[str, int, str], str]
"""Sends task ``name`` for a job id to a queue; returns the new task id."""


def active_job_ids() -> list[int]:
    """Ids of the jobs this worker's pool is running now (call in the worker's main process)."""
    from celery.worker import state

    names = {name for info in JOB_KINDS.values() for name in info.task_names}
    ids = []
    for request in list(state.active_requests):
        args = request.args or []
        if request.name in names and args and isinstance(args[0], int):
            ids.append(args[0])
    return ids


def vouch_for_active_jobs(factory: sessionmaker[Session], *, worker: str) -> int:
    """Refresh the heartbeat of the jobs this worker runs; returns how many."""
    ids = active_job_ids()
    if not ids:
        return 0
    with transaction(factory) as s:
        return touch_jobs(s, job_ids=ids, worker=worker)


def target_of(job: Job) -> Target:
    """The backend and device the job needs, by its kind's rule (as the studio routed it)."""
    return JOB_KINDS[job.kind].stored_target(job.spec)


def recover_stale_jobs(
    factory: sessionmaker[Session],
    *,
    max_age_s: float,
    send: SendTo,
    max_attempts: int = MAX_ATTEMPTS,
    worker: str | None = None,
) -> list[tuple[int, str]]:
    """Re-send or end every running job that lost its worker; returns (job id, outcome).

    ``worker``: the caller is this worker's heartbeat thread. It first vouches, in the same
    transaction, for the jobs its own pool is running: after a database outage longer than the
    stale window the beat that vouches may have failed while this step waited for the database,
    and the worker would otherwise take its own running job for lost and send it again.
    """
    outcomes = []
    with transaction(factory) as s:
        if worker is not None:
            touch_jobs(s, job_ids=active_job_ids(), worker=worker)
        live = [(w.queues, w.inventory) for w in live_workers(s, max_age_s=max_age_s)]
        for job in stale_jobs(s, max_age_s=max_age_s):
            outcome = _recover(s, job, live, send, max_attempts)
            log.warning("job %s lost its worker %s: %s", job.id, job.worker, outcome)
            outcomes.append((job.id, outcome))
    return outcomes


def _recover(
    s: Session,
    job: Job,
    live: list[tuple[list[str], dict[str, Any]]],
    send: SendTo,
    max_attempts: int,
) -> str:
    ended = end_lost_job(s, job=job, max_attempts=max_attempts)
    if ended is not None:
        return ended.value
    lost = job.worker or "unknown"
    (backend, device), queue = queue_for(live, job)
    if queue is None:
        message = (
            f"Failed: its worker ({lost}) stopped responding and no live worker offers "
            f"{backend} on {device} to run it again."
        )
        hint = "Start a worker that offers it, then submit the job again."
        error = ErrorInfo(code=ErrorCode.worker_lost, message=message, hint=hint)
        finish_job(s, job_id=job.id, status=JobStatus.failed, **error_columns(error))
        return "failed"
    task_id = send(task_of(job.kind), job.id, queue)
    message = (
        f"Requeued: its worker ({lost}) stopped responding. Attempt {job.attempts + 1} of "
        f"{max_attempts} will start on a live worker."
    )
    requeue_job(s, job=job, task_id=task_id, message=message)
    return f"requeued to {queue}"


def queue_for(live: list[tuple[list[str], dict[str, Any]]], job: Job) -> tuple[Target, str | None]:
    """The job's target, and the queue of the live worker that offers it and suits the job
    best, by its kind's rules (as the studio routed it); None when no live worker offers it."""
    backend, device = target_of(job)
    suits = JOB_KINDS[job.kind].stored_suits(job.spec)
    return (backend, device), pick_queue(live, backend=backend, device=device, suits=suits)


def resend_missing_jobs(
    factory: sessionmaker[Session],
    *,
    max_age_s: float,
    in_broker: Callable[[], set[str] | None],
    send: SendTo,
) -> list[tuple[int, str]]:
    """Send again every job queued for ``max_age_s`` whose task the broker does not hold.

    Two ways a queued job has no message: Redis lost it (killed with writes not yet on disk, or
    restored from an older file), or its worker was lost while no worker ran and the studio or
    CLI put it back in the queue unsent (``optistudio.db.queries.release_orphaned_jobs``). A job sent twice
    still runs once: ``claim_job`` lets only one delivery run it. Returns (job id, queue).
    """
    with transaction(factory) as s:
        waiting = [(j.id, j.celery_task_id) for j in waiting_jobs(s, queued_for_s=max_age_s)]
    if not waiting:
        return []
    held = in_broker() if any(task_id for _, task_id in waiting) else set()
    missing = _missing(waiting, held)
    if held is not None and any(task_id for _, task_id in missing):
        # a message a worker is taking is, for a moment, in neither the queue nor the unacked
        # hash (Kombu pops it, then records it): only one missing from a second look is lost
        time.sleep(SECOND_LOOK_S)
        again = in_broker()
        missing = _missing(missing, again) if again is not None else missing
    return [
        outcome for job_id, _ in missing if (outcome := _resend(factory, job_id, max_age_s, send))
    ]


def _missing(
    waiting: list[tuple[int, str | None]], held: set[str] | None
) -> list[tuple[int, str | None]]:
    """The (job id, task id) of `waiting` whose task `held` lacks, and those never sent; with
    `held` None (a broker that cannot be read) only those never sent."""
    return [
        (job_id, task_id)
        for job_id, task_id in waiting
        if task_id is None or (held is not None and task_id not in held)
    ]


def _resend(
    factory: sessionmaker[Session], job_id: int, max_age_s: float, send: SendTo
) -> tuple[int, str] | None:
    with transaction(factory) as s:
        job = get_job_for_update(s, job_id=job_id)
        if job is None or job.status is not JobStatus.queued:
            return None  # claimed or ended meanwhile
        live = [(w.queues, w.inventory) for w in live_workers(s, max_age_s=max_age_s)]
        _, queue = queue_for(live, job)
        if queue is None:
            return None  # waits, queued, for a worker that offers its target
        message = (
            f"Requeued: the job queue no longer held it (Redis lost it); sent again to {queue}."
            if job.celery_task_id
            else f"Requeued: a worker started; attempt {job.attempts + 1} will start on it."
        )
        requeue_job(s, job=job, task_id=send(task_of(job.kind), job.id, queue), message=message)
        log.warning("job %s was queued with no message in the broker: sent again", job_id)
        return job_id, queue


def send_with_app(name: str, job_id: int, queue: str) -> str:
    """The worker's own Celery app sends the task (used by the heartbeat thread)."""
    return str(app.send_task(name, args=[job_id], queue=queue).id)


def held_by_app_broker() -> set[str] | None:
    """Task ids the worker's own broker holds (used by the heartbeat thread)."""
    return task_ids_in_broker(app)


def recover(factory: sessionmaker[Session], *, max_age_s: float, worker: str) -> None:
    """One heartbeat's recovery on ``worker``: jobs that lost their worker, then jobs the
    broker lost."""
    recover_stale_jobs(factory, max_age_s=max_age_s, send=send_with_app, worker=worker)
    resend_missing_jobs(
        factory, max_age_s=max_age_s, in_broker=held_by_app_broker, send=send_with_app
    )
