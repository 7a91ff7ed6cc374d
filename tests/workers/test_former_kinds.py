"""Job kinds renamed without a migration: rows written under the former name (`profile`,
`batching_profile`) read as today's kind, the queries for a kind (db's and the pages') find
them, and a message queued under the former task name still runs the job."""

from __future__ import annotations

from pathlib import Path

import pytest
from diagnostic_models import build_cnn
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from optistudio.db.models import FORMER_JOB_KINDS, JobKind, JobStatus
from optistudio.db.queries import finished_jobs, newest_succeeded
from optistudio.db.session import transaction
from optistudio.services.jobkinds import JOB_KINDS, OPERATOR_PROFILE, OperatorProfileJobSpec
from optistudio.studio.jobs_services import jobs_of
from optistudio.workers import tasks
from optistudio.workers.app import app
from tests.workers.conftest import finished_job, queue_job, read_job

RENAMED = [
    ("profile", JobKind.operator_profile),
    ("batching_profile", JobKind.latency_profile),
]


def _store_as(factory: sessionmaker[Session], job_id: int, name: str) -> None:
    """The row's kind written as an older release wrote it."""
    with transaction(factory) as s:
        s.execute(text("UPDATE jobs SET kind = :name WHERE id = :id"), {"name": name, "id": job_id})


@pytest.fixture
def cnn(store_model, tmp_path: Path) -> int:  # type: ignore[no-untyped-def]
    return int(store_model(build_cnn(tmp_path / "cnn.onnx"), name="cnn"))


@pytest.mark.parametrize(("former", "kind"), RENAMED, ids=[name for name, _ in RENAMED])
def test_a_former_kind_name_reads_as_todays_kind(former: str, kind: JobKind) -> None:
    assert JobKind(former) is kind
    assert kind.stored_names() == (kind.value, former)
    assert FORMER_JOB_KINDS[former] == kind.value != former


def test_a_name_that_was_never_a_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="'profiles' is not a valid JobKind"):
        JobKind("profiles")


def test_a_new_row_stores_todays_name(db_factory, cnn) -> None:  # type: ignore[no-untyped-def]
    job_id = queue_job(db_factory, JobKind.operator_profile, OperatorProfileJobSpec(), cnn)

    with transaction(db_factory) as s:
        stored = s.execute(text("SELECT kind FROM jobs WHERE id = :id"), {"id": job_id}).scalar()

    assert stored == "operator_profile"


def test_a_row_stored_under_the_former_name_is_found_as_todays_kind(db_factory, cnn) -> None:  # type: ignore[no-untyped-def]
    spec = OperatorProfileJobSpec(runs=2, warmup_runs=1)
    old = finished_job(db_factory, JobKind.operator_profile, cnn, spec)
    new = finished_job(db_factory, JobKind.operator_profile, cnn, spec)
    _store_as(db_factory, old.id, "profile")

    with transaction(db_factory) as s:
        found = [(job.id, job.kind) for job in finished_jobs(s, kind=JobKind.operator_profile)]
        newest = newest_succeeded(s, kind=JobKind.operator_profile, model_id=cnn)
        assert newest is not None and newest.id == new.id
        listed = [job.id for job in jobs_of(s, kind=JobKind.operator_profile, model_id=cnn)]
        assert listed == [new.id, old.id]  # as the pages list a kind's jobs

    assert found == [(new.id, JobKind.operator_profile), (old.id, JobKind.operator_profile)]
    assert read_job(db_factory, old.id).kind is JobKind.operator_profile


@pytest.mark.parametrize(("former", "kind"), RENAMED, ids=[name for name, _ in RENAMED])
def test_the_former_task_name_is_defined_and_routed(former: str, kind: JobKind) -> None:
    info = JOB_KINDS[kind]

    assert info.task_name == f"optistudio.{kind.value}"
    assert info.task_names == (info.task_name, f"optistudio.{former}")
    assert f"optistudio.{former}" in tasks.TASKS and f"optistudio.{former}" in app.tasks
    assert app.conf.task_routes[f"optistudio.{former}"] == {"queue": info.queue}


def test_a_message_queued_under_the_former_task_name_runs_the_job(db_factory, cnn) -> None:  # type: ignore[no-untyped-def]
    job_id = queue_job(db_factory, OPERATOR_PROFILE.kind, OperatorProfileJobSpec(runs=2), cnn)
    _store_as(db_factory, job_id, "profile")
    tasks.session_factory.cache_clear()  # the worker's factory, on this test's database
    try:
        tasks.TASKS["optistudio.profile"].apply(args=[job_id])
    finally:
        tasks.session_factory.cache_clear()

    job = read_job(db_factory, job_id)
    assert job.status == JobStatus.succeeded, job.message
    assert job.kind is JobKind.operator_profile
    assert OPERATOR_PROFILE.parse_result(job.result).profile.nodes
