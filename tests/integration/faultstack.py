"""A stack for fault and load tests: Redis and named Celery workers that a test can kill,
restart and count, on SQLite or PostgreSQL. Everything is a real process."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from optistudio.cli.launcher import (
    Stack,
    free_port,
    redis_command,
    redis_ready,
    worker_command,
)
from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.services.settings import Settings
from optistudio.services.telemetry import telemetry_off_env

REPO = Path(__file__).resolve().parents[2]
HEARTBEAT_S = 1.0

QUICK = BenchmarkSpec(
    batch_sizes=[1],
    warmup_runs=1,
    min_runs=5,
    min_seconds=0.05,
    max_seconds=1.0,
    window_seconds=0.02,
)
"""A benchmark of about a second on the tiny model."""


def lasting(seconds: float) -> BenchmarkSpec:
    """A benchmark that measures for at least `seconds`."""
    return QUICK.model_copy(update={"min_seconds": seconds, "max_seconds": seconds + 2})


def wait_until(check: Callable[[], Any], what: str, timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


@dataclass
class FaultStack:
    tmp_path: Path
    database_url: str
    redis_port: int = field(default_factory=free_port)
    stack: Stack = field(default_factory=Stack)
    redis: subprocess.Popen[bytes] | None = None
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from optistudio.db.session import make_session_factory
        from optistudio.services.migrate import upgrade
        from optistudio.workers.app import create_app

        self.settings = Settings(
            data_dir=self.tmp_path / "data",
            database_url=self.database_url,
            broker_url=f"redis://127.0.0.1:{self.redis_port}/0",
            heartbeat_s=HEARTBEAT_S,
            job_time_limit_s=120,
        )
        upgrade(self.settings.database_url, lock_dir=self.settings.data_dir)
        self.factory = make_session_factory(self.settings.database_url)
        self.app = create_app(self.settings)
        self.log_path = self.tmp_path / "stack.log"
        self._log = self.log_path.open("ab")

    # -- processes ------------------------------------------------------------------------

    def start_redis(self) -> None:
        command = redis_command(self.redis_port, self.tmp_path / "redis")
        self.redis = subprocess.Popen(command, stdout=self._log, stderr=self._log)
        wait_until(lambda: redis_ready(self.redis_port), "redis answering PING", 30)

    def stop_redis(self) -> None:
        """SIGTERM: Redis writes its append-only file and exits, as on a clean restart."""
        assert self.redis is not None
        self.redis.terminate()
        self.redis.wait(timeout=30)

    def start_worker(self, name: str, *, queues: str = "cpu") -> None:
        env = telemetry_off_env() | {
            "OPTISTUDIO_DATA_DIR": str(self.settings.data_dir),
            "OPTISTUDIO_DATABASE_URL": self.settings.database_url,
            "OPTISTUDIO_BROKER_URL": self.settings.broker_url,
            "OPTISTUDIO_QUEUES": queues,
            "OPTISTUDIO_HEARTBEAT_S": str(HEARTBEAT_S),
            "OPTISTUDIO_JOB_TIME_LIMIT_S": "120",
        }
        command = worker_command(self.settings.model_copy(update={"queues": queues}))
        command[command.index("--hostname") + 1] = f"{name}@%h"
        self.stack.start(name, command, env, output=self._log, cwd=REPO)
        self.workers[name] = self.stack.children[-1][1]

    def wait_for_workers(self, *names: str) -> None:
        from optistudio.studio.worker_services import worker_rows

        def live() -> bool:
            rows = worker_rows(self.factory, max_age_s=3 * HEARTBEAT_S)
            up = {r["worker"].split("@")[0] for r in rows if r["state"] == "live"}
            return set(names) <= up

        try:
            wait_until(live, f"workers {names} reporting", 180)  # inventory is slow on a busy CPU
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.log()}") from None

    def kill_worker(self, name: str) -> None:
        """SIGKILL the worker's whole process group: main process and pool, like a lost machine."""
        process = self.workers[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)

    def kill_pool_process(self, name: str) -> int:
        """SIGKILL only the worker's pool process (the one running the job); returns its pid."""
        children = psutil.Process(self.workers[name].pid).children()
        assert children, "the worker has no pool process"
        children[0].kill()
        return children[0].pid

    def close(self) -> None:
        self.stack.stop()
        if self.redis is not None and self.redis.poll() is None:
            self.redis.kill()
            self.redis.wait()
        self.app.close()
        self.factory.kw["bind"].dispose()
        self._log.close()

    # -- jobs -----------------------------------------------------------------------------

    def send(self, name: str, args: list[Any]) -> str:
        return str(self.app.send_task(name, args=args, queue="cpu").id)

    def job(self, job_id: int) -> Any:
        from optistudio.db.queries import get_job
        from optistudio.db.session import transaction

        with transaction(self.factory) as s:
            return get_job(s, job_id=job_id)

    def wait_for_job(self, job_id: int, statuses: set[str], timeout: float = 90.0) -> Any:
        def reached() -> Any:
            job = self.job(job_id)
            return job if job.status.value in statuses else None

        try:
            return wait_until(reached, f"job {job_id} in {statuses}", timeout)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.log()}") from None

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-6000:]


@contextlib.contextmanager
def running_stack(tmp_path: Path, database_url: str) -> Iterator[FaultStack]:
    """A FaultStack with Redis started, closed (every process stopped) afterwards."""
    stack = FaultStack(tmp_path, database_url)
    try:
        stack.start_redis()
        yield stack
    finally:
        stack.close()


def run_jobs_page(
    stack: FaultStack, monkeypatch: pytest.MonkeyPatch, *, heartbeat_s: float | None = None
) -> tuple[Any, float]:
    """One run of the Jobs page script (``optistudio.studio.views.jobs.render``, its database queries
    included) under Streamlit's AppTest against this stack: (the AppTest, wall seconds of the
    run). Fails on any exception in the page. ``heartbeat_s`` sets the studio's heartbeat."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from optistudio.services.settings import get_settings

    monkeypatch.setenv("OPTISTUDIO_DATA_DIR", str(stack.settings.data_dir))
    monkeypatch.setenv("OPTISTUDIO_DATABASE_URL", stack.settings.database_url)
    monkeypatch.setenv("OPTISTUDIO_BROKER_URL", stack.settings.broker_url)
    if heartbeat_s is not None:
        monkeypatch.setenv("OPTISTUDIO_HEARTBEAT_S", str(heartbeat_s))
    get_settings.cache_clear()
    st.cache_resource.clear()

    def page() -> None:
        from optistudio.studio.views import jobs

        jobs.render()

    # AppTest swaps in its script as __main__ and leaves it there, which breaks any later
    # spawn-based multiprocessing in this pytest process; put the real one back afterwards.
    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])
    app = AppTest.from_function(page, default_timeout=60)
    started = time.perf_counter()
    app.run()
    elapsed = time.perf_counter() - started
    assert not app.exception, [e.message for e in app.exception]
    return app, elapsed
