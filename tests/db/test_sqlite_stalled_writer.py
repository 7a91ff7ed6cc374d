"""A writer that stalls while it holds SQLite's write lock (a worker stopped in the middle of a
transaction) holds up writers, never a page's reads: ``transaction(read_only=True)`` reads the
last committed state at once, ``lock_wait_s`` bounds a best-effort write's wait, and the next
transaction waits the default again. The Jobs page's ``check_workers`` still answers."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from optistudio.db.models import Job, JobKind, JobStatus
from optistudio.db.session import DatabaseUnavailable, transaction
from optistudio.studio.worker_services import check_workers

SHORT_WAIT_S = 0.2


@contextmanager
def stalled_writer(database: str) -> Iterator[sqlite3.Connection]:
    """Another connection inside a write transaction it does not finish: it has taken the lock
    and changed a row, as a stopped worker would have."""
    writer = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("UPDATE jobs SET message = 'uncommitted'")
    try:
        yield writer
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def add_job(factory: Any, status: JobStatus = JobStatus.queued) -> int:
    """A job whose last sign of life is a minute old."""
    beat = datetime.now(UTC) - timedelta(seconds=60)
    with transaction(factory) as s:
        job = Job(
            kind=JobKind.benchmark, spec={}, status=status, message="committed", heartbeat_at=beat
        )
        s.add(job)
        s.flush()
        return job.id


@pytest.fixture
def sqlite_file(app_settings: Any, db_factory: Any) -> str:
    url = app_settings.database_url
    assert url.startswith("sqlite:///")
    return str(url.removeprefix("sqlite:///"))


def test_a_read_only_transaction_reads_the_committed_rows_past_a_stalled_writer(
    db_factory: Any, sqlite_file: str
) -> None:
    job_id = add_job(db_factory)
    # without read_only this BEGIN would wait for the lock and fail after SHORT_WAIT_S
    reading = transaction(db_factory, read_only=True, retry_s=0, lock_wait_s=SHORT_WAIT_S)
    with stalled_writer(sqlite_file), reading as s:
        assert s.scalar(select(Job.message).where(Job.id == job_id)) == "committed"


def test_a_write_with_a_lock_wait_gives_up_then_the_next_waits_the_default(
    db_factory: Any, sqlite_file: str
) -> None:
    job_id = add_job(db_factory)
    with stalled_writer(sqlite_file) as writer:
        started = time.monotonic()
        locked = pytest.raises(DatabaseUnavailable, match="database is locked")
        with locked, transaction(db_factory, retry_s=0, lock_wait_s=SHORT_WAIT_S):
            pass
        assert time.monotonic() - started < 10  # not SQLite's 30-s default wait
        # the same pooled connection, no lock_wait_s: it waits until the writer lets go
        threading.Timer(1.0, writer.execute, args=("ROLLBACK",)).start()
        with transaction(db_factory, retry_s=0) as s:
            s.get_one(Job, job_id).message = "written after the wait"
        writer.execute("BEGIN IMMEDIATE")  # for stalled_writer's own ROLLBACK
    with transaction(db_factory, read_only=True) as s:
        assert s.get_one(Job, job_id).message == "written after the wait"


def test_check_workers_answers_while_a_stalled_writer_holds_the_lock(
    db_factory: Any, sqlite_file: str
) -> None:
    job_id = add_job(db_factory, JobStatus.running)
    with stalled_writer(sqlite_file):
        assert check_workers(db_factory, max_age_s=9) == 0  # no worker; the release left
    with transaction(db_factory, read_only=True) as s:
        assert s.get_one(Job, job_id).status is JobStatus.running
    assert check_workers(db_factory, max_age_s=9) == 0  # the lock free: released now
    with transaction(db_factory, read_only=True) as s:
        assert s.get_one(Job, job_id).status is not JobStatus.running
