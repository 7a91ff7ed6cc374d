"""The Celery tasks are generated from the job-kind table: one per kind, each with its work."""

from __future__ import annotations

from optistudio.db.models import JobKind
from optistudio.services.jobkinds import DEFAULT_QUEUE, JOB_KINDS
from optistudio.services.settings import Settings
from optistudio.workers.app import app, create_app
from optistudio.workers.tasks import TASKS
from optistudio.workers.work import REGISTERED, WORK_OF_KIND


def test_every_kind_has_exactly_one_work_function() -> None:
    kinds = [work.info.kind for work in REGISTERED]

    assert sorted(kinds) == sorted(JobKind) and len(set(kinds)) == len(kinds)
    assert all(work.info is JOB_KINDS[work.info.kind] for work in REGISTERED)
    assert set(WORK_OF_KIND) == set(JobKind)


def test_every_kind_has_its_task_under_its_name() -> None:
    names = {name for info in JOB_KINDS.values() for name in info.task_names}

    assert set(TASKS) == names
    assert names <= set(app.tasks)
    assert all(app.tasks[name].name == name for name in names)


def test_every_task_goes_to_the_default_queue_unless_routing_chose_one(tmp_path) -> None:  # type: ignore[no-untyped-def]
    configured = create_app(Settings(data_dir=tmp_path))

    routes = configured.conf.task_routes
    assert routes == {
        name: {"queue": DEFAULT_QUEUE} for info in JOB_KINDS.values() for name in info.task_names
    }
    assert configured.conf.task_default_queue == DEFAULT_QUEUE == "cpu"
