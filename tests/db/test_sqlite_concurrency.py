"""Several processes doing read-modify-write on one SQLite file lose no update.

With Python's default deferred transactions the SELECT runs outside any transaction, so two
workers read the same value and one increment is lost. ``BEGIN IMMEDIATE`` serialises them.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import TYPE_CHECKING

from alembic import command
from alembic.config import Config
from sqlalchemy import select

from optistudio.db.models import Job, JobKind
from optistudio.db.session import make_session_factory, transaction

if TYPE_CHECKING:
    from multiprocessing.synchronize import Barrier

ALEMBIC_INI = Path(__file__).resolve().parents[2] / "alembic.ini"
PROCESSES = 4
INCREMENTS = 50


def increment_attempts(url: str, job_id: int, start: Barrier) -> None:
    factory = make_session_factory(url)
    start.wait()
    for _ in range(INCREMENTS):
        with transaction(factory) as s:
            attempts = s.scalar(select(Job.attempts).where(Job.id == job_id))
            s.get_one(Job, job_id).attempts = attempts + 1
    factory.kw["bind"].dispose()


def test_concurrent_increments_are_not_lost(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'optistudio.db'}"
    cfg = Config(str(ALEMBIC_INI))
    cfg.attributes.update(url=url, configure_logger=False)
    command.upgrade(cfg, "head")
    factory = make_session_factory(url)
    with transaction(factory) as s:
        job = Job(kind=JobKind.benchmark, spec={})
        s.add(job)
    job_id = job.id
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(PROCESSES)

    workers = [
        ctx.Process(target=increment_attempts, args=(url, job_id, start)) for _ in range(PROCESSES)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)

    assert [w.exitcode for w in workers] == [0] * PROCESSES
    with transaction(factory) as s:
        assert s.get_one(Job, job_id).attempts == PROCESSES * INCREMENTS
