"""Jobs that lost their worker, on SQLite and PostgreSQL: claim rules, stale detection, recovery,
and writes that wait for a database that went away."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from optistudio.db.models import Job, JobKind, JobStatus
from optistudio.db.queries import (
    claim_job,
    create_job,
    get_job,
    record_worker,
    release_orphaned_jobs,
    request_cancel,
    stale_jobs,
    touch_jobs,
    waiting_jobs,
)
from optistudio.db.session import DatabaseUnavailable, make_session_factory, transaction
from optistudio.services.migrate import upgrade
from optistudio.workers.recovery import (
    recover_stale_jobs,
    resend_missing_jobs,
    target_of,
    task_of,
    vouch_for_active_jobs,
)

ORT = {"backends": {"onnxruntime": {"available": True, "devices": ["cpu"]}}}


@pytest.fixture
def factory(database_url: str, tmp_path) -> Iterator[sessionmaker[Session]]:
    upgrade(database_url, lock_dir=tmp_path)
    factory = make_session_factory(database_url)
    yield factory
    factory.kw["bind"].dispose()


def new_job(factory, spec: dict | None = None, kind: JobKind = JobKind.benchmark) -> int:
    with transaction(factory) as s:
        return create_job(s, kind=kind, spec=spec or {}, model_id=None).id


def claim(factory, job_id: int, task_id: str, worker: str = "cpu@a") -> bool:
    with transaction(factory) as s:
        return claim_job(s, job_id=job_id, worker=worker, task_id=task_id) is not None


def job(factory, job_id: int) -> Job:
    with transaction(factory) as s:
        return get_job(s, job_id=job_id)


def age(factory, job_id: int, seconds: float) -> None:
    """Make the job's heartbeat `seconds` old, as if its worker had stopped vouching for it."""
    with transaction(factory) as s:
        then = datetime.now(UTC) - timedelta(seconds=seconds)
        s.execute(update(Job).where(Job.id == job_id).values(heartbeat_at=then))


def add_worker(factory, hostname: str = "cpu@b", queues=("cpu",), inventory=ORT) -> None:
    with transaction(factory) as s:
        record_worker(s, hostname=hostname, queues=list(queues), inventory=inventory)


class Sent(list):
    def __call__(self, name: str, job_id: int, queue: str) -> str:
        self.append((name, job_id, queue))
        return f"new-{len(self)}"


def test_a_delivery_under_another_task_id_does_not_run_a_running_job(factory) -> None:
    job_id = new_job(factory)
    assert claim(factory, job_id, "t1")

    assert not claim(factory, job_id, "t2")
    assert claim(factory, job_id, "t1")  # the same task redelivered: its process died
    assert job(factory, job_id).attempts == 2


def test_a_redelivered_job_past_its_attempts_ends_failed(factory) -> None:
    job_id = new_job(factory)
    for _ in range(3):
        assert claim(factory, job_id, "t1")

    assert not claim(factory, job_id, "t1")
    row = job(factory, job_id)
    assert row.status is JobStatus.failed and row.attempts == 3
    assert "Failed after 3 attempts" in row.message and "cpu@a" in row.message


def test_only_jobs_nobody_vouched_for_are_stale(factory) -> None:
    fresh, old, vouched = (new_job(factory) for _ in range(3))
    for job_id in (fresh, old, vouched):
        claim(factory, job_id, f"t{job_id}")
    age(factory, old, 60)
    age(factory, vouched, 60)
    with transaction(factory) as s:
        assert touch_jobs(s, job_ids=[vouched], worker="cpu@a") == 1
        assert touch_jobs(s, job_ids=[fresh], worker="someone-else") == 0

    with transaction(factory) as s:
        assert [j.id for j in stale_jobs(s, max_age_s=30)] == [old]


class AcceptedRequest:
    """What Celery's worker state keeps of a task its pool is running: id, name and args."""

    def __init__(self, task_id: str, name: str, args: list) -> None:
        self.id, self.name, self.args = task_id, name, args


def test_the_worker_vouches_for_the_jobs_its_pool_is_running(factory) -> None:
    from celery.worker import state

    running, other = new_job(factory), new_job(factory)
    claim(factory, running, "t1")
    claim(factory, other, "t2")
    age(factory, running, 60)
    age(factory, other, 60)
    request = AcceptedRequest("t1", task_of(JobKind.benchmark), [running])
    state.task_accepted(request)  # what the worker's main process does when the pool starts it
    try:
        assert vouch_for_active_jobs(factory, worker="cpu@a") == 1
    finally:
        state.task_ready(request)

    with transaction(factory) as s:
        assert [j.id for j in stale_jobs(s, max_age_s=30)] == [other]
    assert vouch_for_active_jobs(factory, worker="cpu@a") == 0  # finished: nothing to vouch for


def test_a_worker_never_takes_the_job_its_own_pool_runs_for_lost(factory) -> None:
    # After a database outage longer than the stale window, the beat that vouches may have failed
    # while recovery waited for the database: recovery vouches for its own jobs first.
    from celery.worker import state

    mine, lost = new_job(factory), new_job(factory)
    claim(factory, mine, "t1", worker="cpu@a")
    claim(factory, lost, "t2", worker="cpu@dead")
    age(factory, mine, 60)
    age(factory, lost, 60)
    add_worker(factory, hostname="cpu@a")
    request = AcceptedRequest("t1", task_of(JobKind.benchmark), [mine])
    state.task_accepted(request)
    try:
        outcomes = recover_stale_jobs(factory, max_age_s=30, send=Sent(), worker="cpu@a")
    finally:
        state.task_ready(request)

    assert outcomes == [(lost, "requeued to cpu")]
    assert job(factory, mine).status is JobStatus.running
    # Without the worker's name (another process's recovery) the same job reads as lost.
    age(factory, mine, 60)
    assert recover_stale_jobs(factory, max_age_s=30, send=Sent()) == [(mine, "requeued to cpu")]


def test_a_lost_job_is_sent_again_to_a_live_worker_and_the_old_delivery_is_ignored(
    factory,
) -> None:
    job_id = new_job(factory, {"backend": "onnxruntime", "device": "cpu"})
    claim(factory, job_id, "t1", worker="cpu@dead")
    age(factory, job_id, 60)
    add_worker(factory)
    sent = Sent()

    outcomes = recover_stale_jobs(factory, max_age_s=30, send=sent)

    assert outcomes == [(job_id, "requeued to cpu")]
    assert sent == [(task_of(JobKind.benchmark), job_id, "cpu")]
    row = job(factory, job_id)
    assert (row.status, row.celery_task_id) == (JobStatus.queued, "new-1")
    assert "cpu@dead" in row.message and "Attempt 2 of 3" in row.message
    assert recover_stale_jobs(factory, max_age_s=30, send=sent) == []
    assert claim(factory, job_id, "new-1", worker="cpu@b")
    assert not claim(factory, job_id, "t1")  # the old message, if the broker redelivers it
    assert job(factory, job_id).attempts == 2


@pytest.mark.parametrize(("recipes", "queue"), [(["qat"], "gpu"), (["fp16"], "cpu")])
def test_a_lost_qat_job_goes_again_to_the_worker_that_trains_on_a_gpu(
    factory, recipes, queue
) -> None:
    """Recovery ranks live workers by the job kind's rule, as the studio routed the job; the
    CPU worker beats last, so without the rule it would be the one chosen."""
    spec = {"recipes": recipes, "target_backend": "onnxruntime"}
    job_id = new_job(factory, spec, JobKind.optimize)
    claim(factory, job_id, "t1", worker="cpu@dead")
    age(factory, job_id, 60)
    trainer = ORT | {"training": {"torch": "2.13", "device": "cuda"}}
    add_worker(factory, "gpu@c", ("gpu",), trainer)
    add_worker(factory, "cpu@b", ("cpu",), ORT)
    sent = Sent()

    recover_stale_jobs(factory, max_age_s=30, send=sent)

    assert sent == [(task_of(JobKind.optimize), job_id, queue)]


def test_a_lost_job_at_its_limit_ends_failed_with_the_reason(factory) -> None:
    job_id = new_job(factory)
    for _ in range(3):
        claim(factory, job_id, "t1", worker="cpu@dead")
    age(factory, job_id, 60)
    add_worker(factory)
    sent = Sent()

    assert recover_stale_jobs(factory, max_age_s=30, send=sent) == [(job_id, "failed")]
    assert sent == []
    row = job(factory, job_id)
    assert row.status is JobStatus.failed and "Failed after 3 attempts" in row.message


def test_a_lost_job_no_live_worker_can_serve_ends_failed(factory) -> None:
    job_id = new_job(factory, {"target_backend": "openvino"}, kind=JobKind.optimize)
    claim(factory, job_id, "t1", worker="vino@dead")
    age(factory, job_id, 60)
    add_worker(factory)  # offers onnxruntime only

    assert recover_stale_jobs(factory, max_age_s=30, send=Sent()) == [(job_id, "failed")]
    message = job(factory, job_id).message
    assert "vino@dead" in message and "no live worker offers openvino on cpu" in message


def test_a_lost_job_with_a_cancel_pending_ends_cancelled(factory) -> None:
    job_id = new_job(factory)
    claim(factory, job_id, "t1", worker="cpu@dead")
    with transaction(factory) as s:
        request_cancel(s, job_id=job_id)
    age(factory, job_id, 60)

    assert recover_stale_jobs(factory, max_age_s=30, send=Sent()) == [(job_id, "cancelled")]
    assert job(factory, job_id).status is JobStatus.cancelled


def lost_with_no_worker(factory, attempts: int = 1) -> int:
    """A running job whose worker died while no other worker is live."""
    job_id = new_job(factory, {"backend": "onnxruntime", "device": "cpu"})
    for _ in range(attempts):
        claim(factory, job_id, "t1", worker="cpu@dead")
    age(factory, job_id, 60)
    return job_id


def release(factory) -> list[tuple[int, str]]:
    with transaction(factory) as s:
        return release_orphaned_jobs(s, max_age_s=30)


def test_with_no_live_worker_a_lost_job_is_queued_again_unsent_saying_so(factory) -> None:
    job_id = lost_with_no_worker(factory)

    assert release(factory) == [(job_id, "queued")]

    row = job(factory, job_id)
    assert (row.status, row.celery_task_id, row.attempts) == (JobStatus.queued, None, 1)
    assert row.message == (
        "Worker lost: its worker (cpu@dead) stopped responding and no worker is running. "
        "Attempt 2 of 3 will start when a worker starts."
    )
    assert release(factory) == []  # done once


@pytest.mark.parametrize(
    ("attempts", "cancel", "status", "says"),
    [
        (3, False, JobStatus.failed, "Failed after 3 attempts"),
        (1, True, JobStatus.cancelled, "Cancelled (its worker cpu@dead"),
    ],
    ids=["at-its-limit-fails", "cancel-pending-is-cancelled"],
)
def test_with_no_live_worker_a_lost_job_that_must_not_run_again_ends(
    factory, attempts: int, cancel: bool, status: JobStatus, says: str
) -> None:
    job_id = lost_with_no_worker(factory, attempts)
    if cancel:
        with transaction(factory) as s:
            request_cancel(s, job_id=job_id)

    assert release(factory) == [(job_id, status.value)]
    row = job(factory, job_id)
    assert row.status is status and row.message.startswith(says)


def test_with_a_live_worker_lost_jobs_are_left_to_its_recovery(factory) -> None:
    job_id = lost_with_no_worker(factory)
    add_worker(factory)

    assert release(factory) == []
    assert job(factory, job_id).status is JobStatus.running


def queued_job(factory, task_id: str | None, queued_s_ago: float) -> int:
    job_id = new_job(factory, {"backend": "onnxruntime", "device": "cpu"})
    with transaction(factory) as s:
        then = datetime.now(UTC) - timedelta(seconds=queued_s_ago)
        s.execute(
            update(Job).where(Job.id == job_id).values(celery_task_id=task_id, heartbeat_at=then)
        )
    return job_id


def test_queued_jobs_the_broker_does_not_hold_are_sent_again_once(factory) -> None:
    held = queued_job(factory, "in-redis", 60)
    lost = queued_job(factory, "lost-by-redis", 60)
    unsent = queued_job(factory, None, 60)  # released while no worker ran
    fresh = queued_job(factory, "just-sent", 1)  # its message may still be on the way
    add_worker(factory)
    sent = Sent()

    outcomes = resend_missing_jobs(factory, max_age_s=30, in_broker=lambda: {"in-redis"}, send=sent)

    assert outcomes == [(lost, "cpu"), (unsent, "cpu")]
    assert sent == [(task_of(JobKind.benchmark), j, "cpu") for j in (lost, unsent)]
    assert [job(factory, j).celery_task_id for j in (held, lost, unsent, fresh)] == [
        "in-redis",
        "new-1",
        "new-2",
        "just-sent",
    ]
    assert "Redis lost it" in job(factory, lost).message
    assert "a worker started" in job(factory, unsent).message
    held_now = {"in-redis", "new-1", "new-2"}  # queued again just now, and held
    assert resend_missing_jobs(factory, max_age_s=30, in_broker=lambda: held_now, send=sent) == []


def test_a_task_a_worker_was_taking_is_not_sent_again(factory, monkeypatch) -> None:
    """A message a worker is taking off the queue is for a moment in neither the queue nor the
    unacked hash: only a task missing from a second look too is lost."""
    from optistudio.workers import recovery

    monkeypatch.setattr(recovery, "SECOND_LOOK_S", 0.0)
    taking = queued_job(factory, "being-taken", 60)
    lost = queued_job(factory, "lost-by-redis", 60)
    add_worker(factory)
    looks = iter([set(), {"being-taken"}])
    sent = Sent()

    outcomes = resend_missing_jobs(factory, max_age_s=30, in_broker=lambda: next(looks), send=sent)

    assert outcomes == [(lost, "cpu")]
    assert job(factory, taking).celery_task_id == "being-taken"
    assert next(looks, "no third look") == "no third look"


def test_an_unknown_broker_resends_only_jobs_never_sent(factory) -> None:
    queued_job(factory, "maybe-held", 60)
    unsent = queued_job(factory, None, 60)
    add_worker(factory)

    outcomes = resend_missing_jobs(factory, max_age_s=30, in_broker=lambda: None, send=Sent())

    assert outcomes == [(unsent, "cpu")]


def test_a_job_never_queued_again_counts_from_its_creation(factory) -> None:
    new_job(factory)  # just created: the studio sends it right after this commit
    created_long_ago = new_job(factory)
    with transaction(factory) as s:
        then = datetime.now(UTC) - timedelta(seconds=60)
        s.execute(update(Job).where(Job.id == created_long_ago).values(created_at=then))

    with transaction(factory) as s:
        assert [j.id for j in waiting_jobs(s, queued_for_s=30)] == [created_long_ago]


def test_a_job_no_live_worker_can_serve_stays_queued_unsent(factory) -> None:
    job_id = queued_job(factory, None, 60)
    add_worker(factory, inventory={"backends": {}})

    assert resend_missing_jobs(factory, max_age_s=30, in_broker=set, send=Sent()) == []
    assert job(factory, job_id).status is JobStatus.queued


def test_every_job_kind_names_a_task_the_workers_define() -> None:
    from optistudio.workers.tasks import TASKS

    former = {f"optistudio.{name}" for kind in JobKind for name in kind.former_names()}

    assert {task_of(kind) for kind in JobKind} | former == set(TASKS)


def test_target_of_reads_the_spec_of_each_kind() -> None:
    optimize = Job(kind=JobKind.optimize, spec={"target_backend": "openvino"})
    anywhere = Job(kind=JobKind.optimize, spec={"target_backend": "any"})
    compare = Job(
        kind=JobKind.compare,
        spec={"backend": "tensorrt", "device": "cuda:0", "candidate_model_id": 2},
    )
    assert target_of(optimize) == ("openvino", "cpu")
    assert target_of(anywhere) == ("onnxruntime", "cpu")  # as the studio routed it
    assert target_of(compare) == ("tensorrt", "cuda:0")
    assert target_of(Job(kind=JobKind.benchmark, spec={})) == ("onnxruntime", "cpu")


def test_a_job_whose_spec_does_not_read_goes_to_the_reference_target() -> None:
    broken = Job(kind=JobKind.benchmark, spec={"backend": "tensorrt", "colour": "red"})

    assert target_of(broken) == ("onnxruntime", "cpu")  # the worker fails it, saying why


@pytest.fixture
def pg_factory(postgres_server) -> Iterator[tuple[object, sessionmaker[Session]]]:
    url = postgres_server.create_database()
    upgrade(url, lock_dir=postgres_server.data_dir.parent / "locks")
    factory = make_session_factory(url)
    yield postgres_server, factory
    factory.kw["bind"].dispose()
    postgres_server.drop_database(url)


def test_a_write_waits_for_a_restarting_postgresql(pg_factory) -> None:
    server, factory = pg_factory
    job_id = new_job(factory)
    server.stop()
    restart = threading.Timer(2.0, server.start)
    restart.start()
    try:
        started = time.monotonic()
        with transaction(factory, retry_s=30) as s:
            request_cancel(s, job_id=job_id)
        waited = time.monotonic() - started
    finally:
        restart.join()
    assert waited >= 1.0  # it really waited for the server rather than finding it up
    assert job(factory, job_id).status is JobStatus.cancelled


def test_a_database_down_past_the_window_raises_database_unavailable(pg_factory) -> None:
    server, factory = pg_factory
    server.stop()
    try:
        with (
            pytest.raises(DatabaseUnavailable, match=r"could not be reached for \d+ s"),
            transaction(factory, retry_s=1.0),
        ):
            pass
    finally:
        server.start()
