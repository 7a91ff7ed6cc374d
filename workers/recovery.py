"""Jobs whose worker was lost: found through the heartbeat, then run again or ended clearly.

Every worker's heartbeat thread (``workers.inventory``) first refreshes the heartbeat of the jobs
its pool is running (Celery's active requests, kept in the worker's main process), then looks
for running jobs that nobody has vouched for in ``HEARTBEAT_STALE_FACTOR`` intervals. Such a
job lost its worker (SIGKILL, a crashed machine, a task that ended without recording its
outcome because the database was down). It is

- cancelled, if a cancel was asked for;
- failed with a message saying so, once it has been started ``MAX_ATTEMPTS`` times;
- failed with a message, when no live worker offers its target any more;
- otherwise sent again, under a new task id, to the queue of a live worker that offers its
  target. The old message, should the broker ever redeliver it, finds the job under another
  task id and does nothing (``db.queries.claim_job``), so a job never runs twice at once.

A worker whose pool process dies (but whose main process lives) hands the task back to the
broker itself (``task_reject_on_worker_lost``); ``claim_job`` counts those attempts too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from core.inventory import offers
from db.models import Job, JobKind, JobStatus
from db.queries import (
    MAX_ATTEMPTS,
    finish_job,
    gave_up_message,
    live_workers,
    requeue_job,
    stale_jobs,
    touch_jobs,
)
from db.session import transaction

log = logging.getLogger(__name__)

TASK_PREFIX = "optistudio."


def task_of(kind: JobKind) -> str:
    """The task that runs a job kind: every task is named ``optistudio.<kind>`` (workers.app)."""
    return f"{TASK_PREFIX}{kind.value}"


SendTo = Callable[[str, int, str], str]
"""Sends task ``name`` for a job id to a queue; returns the new task id."""


def active_job_ids() -> list[int]:
    """Ids of the jobs this worker's pool is running now (call in the worker's main process)."""
    from celery.worker import state

    names = {task_of(kind) for kind in JobKind}
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


def target_of(job: Job) -> tuple[str, str]:
    """The backend and device the job needs, from its spec."""
    spec = job.spec or {}
    if job.kind is JobKind.optimize:
        return str(spec.get("target_backend", "onnxruntime")), "cpu"
    return str(spec.get("backend", "onnxruntime")), str(spec.get("device", "cpu"))


def recover_stale_jobs(
    factory: sessionmaker[Session],
    *,
    max_age_s: float,
    send: SendTo,
    max_attempts: int = MAX_ATTEMPTS,
) -> list[tuple[int, str]]:
    """Re-send or end every running job that lost its worker; returns (job id, outcome)."""
    outcomes = []
    with transaction(factory) as s:
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
    lost = job.worker or "unknown"
    if job.cancel_requested:
        message = f"Cancelled (its worker {lost} had stopped responding)."
        finish_job(s, job_id=job.id, status=JobStatus.cancelled, message=message)
        return "cancelled"
    if job.attempts >= max_attempts:
        message = gave_up_message(job.attempts, job.worker)
        finish_job(s, job_id=job.id, status=JobStatus.failed, message=message)
        return "failed"
    backend, device = target_of(job)
    queue = next(
        (
            queues[0]
            for queues, inv in live
            if queues and offers(inv, backend=backend, device=device)
        ),
        None,
    )
    if queue is None:
        message = (
            f"Failed: its worker ({lost}) stopped responding and no live worker offers "
            f"{backend} on {device} to run it again. Start one, then submit the job again."
        )
        finish_job(s, job_id=job.id, status=JobStatus.failed, message=message)
        return "failed"
    task_id = send(task_of(job.kind), job.id, queue)
    message = (
        f"Requeued: its worker ({lost}) stopped responding. Attempt {job.attempts + 1} of "
        f"{max_attempts} will start on a live worker."
    )
    requeue_job(s, job=job, task_id=task_id, message=message)
    return f"requeued to {queue}"


def send_with_app(name: str, job_id: int, queue: str) -> str:
    """The worker's own Celery app sends the task (used by the heartbeat thread)."""
    from workers.app import app

    return str(app.send_task(name, args=[job_id], queue=queue).id)
