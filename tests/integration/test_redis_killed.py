"""Redis SIGKILLed (no clean shutdown) with jobs queued, under the settings `optistudio up` runs
it with (`appendonly yes`, `appendfsync everysec`, no RDB snapshots: optistudio/launcher.py).

Right after the kill, a copy of Redis's data folder is opened by a second Redis that no worker
knows, to count which queued messages survived, before the real one restarts. A SIGKILL leaves
the operating system's page cache intact, so the last second is lost only when the machine
itself goes down before the fsync; the second test reproduces that by cutting the append-only
file back to its size before the last submissions. Either way the database is the list of jobs
still to run: a worker sends again every queued job the broker does not hold
(optistudio.workers.recovery.resend_missing_jobs), and each job runs once. docs/RELIABILITY.md quotes the
counts these tests print.
"""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from faultstack import QUICK, FaultStack, running_stack, wait_until

from optistudio.cli.launcher import free_port, redis_command, redis_ready
from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.db.queries import results_rows
from optistudio.db.session import transaction
from optistudio.services.catalog import add_model_file
from optistudio.studio.jobs_services import submit_benchmark
from optistudio.workers.app import create_app
from optistudio.workers.broker_contents import task_ids_in_broker

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.faults]

BUSY = QUICK.model_copy(update={"min_seconds": 4.0, "max_seconds": 6.0})
"""Keeps the only worker busy, so the jobs submitted meanwhile stay in Redis's queue."""
TERMINAL = {"succeeded", "failed", "cancelled"}


@pytest.fixture
def faults(tmp_path: Path) -> Iterator[FaultStack]:
    """Broker faults do not depend on the kind of database: SQLite only."""
    with running_stack(tmp_path, f"sqlite:///{tmp_path / 'data' / 'optistudio.db'}") as stack:
        yield stack


def busy_worker_and_model(faults: FaultStack, tiny_model: Path) -> tuple[int, int]:
    """One worker running a long job; returns (model id, that job's id)."""
    model_id = add_model_file(faults.factory, faults.settings, tiny_model, name="t").model_id
    faults.start_worker("w1")
    faults.wait_for_workers("w1")
    busy = submit(faults, model_id, BUSY)
    faults.wait_for_job(busy, {"running"})
    return model_id, busy


def submit(faults: FaultStack, model_id: int, spec: BenchmarkSpec = QUICK) -> int:
    return submit_benchmark(faults.factory, model_id=model_id, spec=spec, send=faults.send)


def kill_redis(faults: FaultStack) -> None:
    assert faults.redis is not None
    faults.redis.kill()  # SIGKILL: no append-only file rewrite, no final fsync
    faults.redis.wait(timeout=30)


def append_only_file(redis_dir: Path) -> Path:
    """Redis 6's appendonly.aof, or Redis 7's newest incremental file in appendonlydir/."""
    increments = sorted((redis_dir / "appendonlydir").glob("*.incr.aof"))
    return increments[-1] if increments else redis_dir / "appendonly.aof"


def task_ids_in_copy(faults: FaultStack) -> set[str]:
    """Task ids a second Redis finds when it opens a copy of the killed one's data folder."""
    copy = faults.tmp_path / "redis-copy"
    shutil.copytree(faults.tmp_path / "redis", copy)
    port = free_port()
    process = subprocess.Popen(redis_command(port, copy), stdout=subprocess.DEVNULL)
    app = create_app(
        faults.settings.model_copy(update={"broker_url": f"redis://127.0.0.1:{port}/0"})
    )
    try:
        wait_until(lambda: redis_ready(port), "the copy answering PING", 30)
        ids = task_ids_in_broker(app)
        assert ids is not None
        return ids
    finally:
        app.close()
        process.kill()
        process.wait(timeout=30)


def task_ids(faults: FaultStack, job_ids: list[int]) -> list[str]:
    return [faults.job(j).celery_task_id for j in job_ids]


def all_ran_once(faults: FaultStack, job_ids: list[int]) -> list:
    jobs = [faults.wait_for_job(j, TERMINAL, timeout=180) for j in job_ids]
    assert [j.status.value for j in jobs] == ["succeeded"] * len(jobs), [j.message for j in jobs]
    assert [j.attempts for j in jobs] == [1] * len(jobs)  # none started twice
    with transaction(faults.factory) as s:
        rows = results_rows(s, job_ids=job_ids)
    per_key = Counter((r["job_id"], r["batch_size"], r["metric"]) for r in rows)
    assert {r["job_id"] for r in rows} == set(job_ids) and max(per_key.values()) == 1
    return jobs


def resent(faults: FaultStack, job_ids: list[int]) -> list[int]:
    log = faults.log_path.read_text(errors="replace")
    return [j for j in job_ids if f"job {j} was queued with no message in the broker" in log]


def test_redis_sigkilled_right_after_a_burst_of_submissions_loses_no_job(
    faults: FaultStack, tiny_model: Path
) -> None:
    model_id, busy = busy_worker_and_model(faults, tiny_model)
    queued = [submit(faults, model_id) for _ in range(30)]

    kill_redis(faults)  # at once: the last submissions are well inside the fsync second
    survived = task_ids_in_copy(faults)
    faults.start_redis()
    all_ran_once(faults, [busy, *queued])

    in_redis = [t in survived for t in task_ids(faults, queued)]
    print(
        f"\nredis SIGKILL: 30 queued jobs submitted, {sum(in_redis)} in Redis after the kill, "
        f"{len(resent(faults, queued))} sent again by the worker; 31 of 31 succeeded once"
    )
    assert sorted(resent(faults, queued)) == [
        j for j, held in zip(queued, in_redis, strict=True) if not held
    ]


def test_redis_losing_its_last_second_loses_no_job(faults: FaultStack, tiny_model: Path) -> None:
    """The machine goes down within `appendfsync everysec`'s second: the writes Redis had not
    yet fsynced are gone. Reproduced by cutting the append-only file back to where it was
    before the last 10 submissions, after a SIGKILL."""
    model_id, busy = busy_worker_and_model(faults, tiny_model)
    synced = [submit(faults, model_id) for _ in range(10)]
    aof = append_only_file(faults.tmp_path / "redis")
    synced_size = aof.stat().st_size  # Redis writes each command before it answers
    last_second = [submit(faults, model_id) for _ in range(10)]

    kill_redis(faults)
    with aof.open("r+b") as file:
        file.truncate(synced_size)
    survived = task_ids_in_copy(faults)
    faults.start_redis()

    assert not set(task_ids(faults, last_second)) & survived  # really lost by Redis
    all_ran_once(faults, [busy, *synced, *last_second])
    kept = sum(t in survived for t in task_ids(faults, synced))
    print(
        f"\nredis lost its last second: 20 queued jobs submitted, {kept} of the first 10 and 0 "
        f"of the last 10 in Redis after the restart, {len(resent(faults, synced + last_second))} "
        "sent again by the worker; 21 of 21 succeeded once"
    )
    assert resent(faults, last_second) == last_second
