"""The Celery tasks, one per job kind, generated from the job-kind table.

Every task has the same thin body: take the job id (only ids travel through the broker) and hand
the job to `optistudio.workers.jobs.run_job` with its kind's work function
(`optistudio.workers.work`). Each is named ``optistudio.<kind>`` (`JobKindInfo.task_name`):
those names are in brokers' queues, so a kind that is renamed keeps a task under its former
name too (`JobKindInfo.task_names`), running the same work, for the messages queued before.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from celery import Task
from sqlalchemy.orm import Session, sessionmaker

from optistudio.db.session import make_session_factory
from optistudio.services.jobkinds import JOB_KINDS, JobKindInfo
from optistudio.services.settings import get_settings
from optistudio.workers.app import app
from optistudio.workers.jobs import run_job
from optistudio.workers.work import work_of


@lru_cache(maxsize=1)
def session_factory() -> sessionmaker[Session]:
    return make_session_factory(get_settings().database_url)


def define_task(info: JobKindInfo[Any, Any], name: str) -> Task:
    """The task `name` that runs jobs of this kind."""
    work = work_of(info.kind)

    def run(self: Task, job_id: int) -> None:
        worker = self.request.hostname or "local"
        run_job(session_factory(), job_id, worker=worker, task_id=self.request.id, work=work)

    run.__name__ = run.__qualname__ = info.kind.value
    run.__doc__ = f"{info.label}: run job `job_id` on this worker."
    task: Task = app.task(name=name, bind=True)(run)
    return task


TASKS: dict[str, Task] = {
    name: define_task(info, name) for info in JOB_KINDS.values() for name in info.task_names
}
"""Every task this worker defines, by name (a renamed kind's former name included)."""
