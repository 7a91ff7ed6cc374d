"""The Celery app, configured from settings.

Only job ids travel through the broker; the job row is the source of truth. Tasks are acked
late and re-queued if their worker dies, so every task must be safe to run twice.
"""

from __future__ import annotations

from celery import Celery

from optistudio.services.jobkinds import DEFAULT_QUEUE, JOB_KINDS
from optistudio.services.settings import Settings, get_settings

TASK_MODULES = ["optistudio.workers.tasks", "optistudio.workers.inventory"]
"""Loaded by the worker only: the tasks (one per job kind) and the heartbeat."""


def create_app(settings: Settings) -> Celery:
    app = Celery(
        "optistudio",
        broker=settings.broker_url,
        include=TASK_MODULES,
    )
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue=DEFAULT_QUEUE,
        task_routes={
            name: {"queue": info.queue} for info in JOB_KINDS.values() for name in info.task_names
        },
        task_time_limit=settings.job_time_limit_s + 60,
        task_soft_time_limit=settings.job_time_limit_s,
        # Longer than the longest job, or Redis redelivers a task that is still running.
        broker_transport_options={"visibility_timeout": 2 * settings.job_time_limit_s + 600},
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
    )
    return app


app = create_app(get_settings())
