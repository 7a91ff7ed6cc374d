"""A real stack for integration tests: Redis and a Celery worker as separate processes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from optistudio.cli.launcher import Stack, free_port, redis_command, redis_ready, worker_command
from optistudio.services.settings import Settings
from optistudio.services.telemetry import telemetry_off_env

REPO = Path(__file__).resolve().parents[2]


@dataclass
class RunningStack:
    settings: Settings
    factory: Any
    app: Any
    log_path: Path

    def send(self, name: str, args: list[Any]) -> str:
        return str(self.app.send_task(name, args=args).id)

    def wait_for_job(self, job_id: int, *, statuses: set[str], timeout: float = 90.0) -> Any:
        from optistudio.db.queries import get_job
        from optistudio.db.session import transaction

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with transaction(self.factory) as s:
                job = get_job(s, job_id=job_id)
                if job is not None and job.status.value in statuses:
                    return job
            time.sleep(0.2)
        raise AssertionError(f"job {job_id} not in {statuses} after {timeout} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def stack_database(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, str]]:
    """A folder for one module's stack and an empty database of each kind in it
    (tests/conftest.py's ``database_url``, once per module)."""
    from pgserver import empty_database

    folder = tmp_path_factory.mktemp("worker_stack")
    with empty_database(request, folder) as url:
        yield folder, url


@pytest.fixture(scope="module")
def worker_stack(stack_database: tuple[Path, str]) -> Iterator[RunningStack]:
    """Redis and one worker on SQLite and on PostgreSQL, shared by the tests of a module that
    one pytest-xdist worker runs (a stack takes 7-9 s to start and stop: 14 of them were 129 s
    of `make test`'s test time, now 37 s); each test stores its own models and reads its own
    jobs. (``--dist loadgroup`` would keep the module on one worker, but pytest 9.2 drops the
    group from the test ids it schedules by: pytest-xdist issue 1386.)"""
    from optistudio.db.session import make_session_factory
    from optistudio.services.migrate import upgrade
    from optistudio.workers.app import create_app

    folder, database_url = stack_database
    redis_port = free_port()
    env = telemetry_off_env()
    env.update(
        OPTISTUDIO_DATA_DIR=str(folder / "data"),
        OPTISTUDIO_BROKER_URL=f"redis://127.0.0.1:{redis_port}/0",
        OPTISTUDIO_JOB_TIME_LIMIT_S="120",
        OPTISTUDIO_DATABASE_URL=database_url,
    )
    settings = Settings(
        data_dir=folder / "data",
        broker_url=env["OPTISTUDIO_BROKER_URL"],
        database_url=database_url,
    )
    upgrade(settings.database_url, lock_dir=settings.data_dir)
    stack = Stack()
    log_path = folder / "worker.log"
    with log_path.open("wb") as log:
        stack.start("redis", redis_command(redis_port, folder / "redis"), output=log)
        _wait(lambda: redis_ready(redis_port), "redis")
        stack.start("worker", worker_command(settings), env, output=log, cwd=REPO)
        app = create_app(settings)
        try:
            _wait(lambda: bool(app.control.ping(timeout=0.5)), "celery worker", timeout=60)
            yield RunningStack(settings, make_session_factory(settings.database_url), app, log_path)
        finally:
            stack.stop()
            app.close()


def _wait(check: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} did not start within {timeout} s")
