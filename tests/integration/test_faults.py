"""Jobs survive faults: killed workers, a restarted Redis, a database that goes away, cancels.

Real Redis, real Celery workers (heartbeat 1 s, so a lost job is noticed after about 3 s), real
SQLite or PostgreSQL. docs/RELIABILITY.md lists these scenarios and their observed outcomes.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from faultstack import QUICK, FaultStack, lasting, running_stack, wait_until

from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.db.queries import results_rows
from optistudio.db.session import transaction
from optistudio.services.catalog import add_model_file
from optistudio.studio.jobs_services import cancel_job, submit_benchmark

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.faults]

SLOW = lasting(6.0)
"""Long enough to be killed in the middle of."""


@pytest.fixture
def faults(tmp_path: Path, database_url: str) -> Iterator[FaultStack]:
    with running_stack(tmp_path, database_url) as stack:
        yield stack


@pytest.fixture
def model_id(faults: FaultStack, tiny_model: Path) -> int:
    return add_model_file(faults.factory, faults.settings, tiny_model, name="tiny").model_id


def submit(faults: FaultStack, model_id: int, spec: BenchmarkSpec = QUICK) -> int:
    return submit_benchmark(faults.factory, model_id=model_id, spec=spec, send=faults.send)


def measurement_keys(faults: FaultStack, job_id: int) -> Counter[tuple[int, str]]:
    with transaction(faults.factory) as s:
        return Counter((r["batch_size"], r["metric"]) for r in results_rows(s, job_ids=[job_id]))


def test_a_job_whose_worker_is_sigkilled_runs_again_on_the_live_worker(
    faults: FaultStack, model_id: int
) -> None:
    faults.start_worker("w1")
    faults.start_worker("w2")
    faults.wait_for_workers("w1", "w2")
    job_id = submit(faults, model_id, SLOW)
    running = faults.wait_for_job(job_id, {"running"})
    victim = running.worker.split("@")[0]
    survivor = ({"w1", "w2"} - {victim}).pop()
    time.sleep(1.0)  # well into the measurement

    faults.kill_worker(victim)
    job = faults.wait_for_job(job_id, {"succeeded", "failed", "cancelled"}, timeout=60)

    assert job.status.value == "succeeded", job.message
    assert job.worker.startswith(f"{survivor}@") and job.attempts == 2
    keys = measurement_keys(faults, job_id)
    assert keys and max(keys.values()) == 1  # one row per (batch, metric): nothing duplicated


def test_a_job_whose_pool_process_dies_each_time_fails_after_its_attempts(
    faults: FaultStack, model_id: int
) -> None:
    faults.start_worker("w1")
    faults.wait_for_workers("w1")
    job_id = submit(faults, model_id, SLOW)

    for attempt in (1, 2, 3):
        wait_until(
            lambda attempt=attempt: (
                (job := faults.job(job_id)).status.value == "running" and job.attempts == attempt
            ),
            f"attempt {attempt} running",
        )
        time.sleep(0.5)
        faults.kill_pool_process("w1")
    job = faults.wait_for_job(job_id, {"succeeded", "failed", "cancelled"}, timeout=60)

    assert (job.status.value, job.error_code) == ("failed", "worker_lost")
    assert job.message.startswith("Failed after 3 attempts") and "w1@" in job.message
    assert "Traceback" not in job.message
    # The worker itself lived through it and still runs jobs.
    after = faults.wait_for_job(submit(faults, model_id), {"succeeded", "failed"}, timeout=60)
    assert after.status.value == "succeeded", after.message


@pytest.fixture
def sqlite_faults(tmp_path: Path) -> Iterator[FaultStack]:
    """For broker faults, where the kind of database does not matter: SQLite only."""
    stack = FaultStack(tmp_path, f"sqlite:///{tmp_path / 'data' / 'optistudio.db'}")
    try:
        stack.start_redis()
        yield stack
    finally:
        stack.close()


def test_a_redis_restart_loses_no_queued_or_running_job(
    sqlite_faults: FaultStack, tiny_model: Path
) -> None:
    faults = sqlite_faults
    model_id = add_model_file(faults.factory, faults.settings, tiny_model, name="t").model_id
    faults.start_worker("w1")
    faults.wait_for_workers("w1")
    running = submit(faults, model_id, lasting(3.0))
    queued = [submit(faults, model_id) for _ in range(5)]
    faults.wait_for_job(running, {"running"})

    faults.stop_redis()
    time.sleep(2.0)
    faults.start_redis()
    jobs = [
        faults.wait_for_job(j, {"succeeded", "failed", "cancelled"}) for j in [running, *queued]
    ]

    assert [j.status.value for j in jobs] == ["succeeded"] * 6, [j.message for j in jobs]
    assert all(max(measurement_keys(faults, j.id).values()) == 1 for j in jobs)


def test_cancel_works_for_a_queued_and_a_running_job(faults: FaultStack, model_id: int) -> None:
    faults.start_worker("w1")
    faults.wait_for_workers("w1")
    running = submit(faults, model_id, SLOW)
    queued = submit(faults, model_id)
    faults.wait_for_job(running, {"running"})

    revoke = faults.app.control.revoke
    said_queued = cancel_job(faults.factory, job_id=queued, revoke=revoke)
    said_running = cancel_job(faults.factory, job_id=running, revoke=revoke)
    first = faults.wait_for_job(running, {"succeeded", "failed", "cancelled"}, timeout=30)
    second = faults.wait_for_job(queued, {"succeeded", "failed", "cancelled"}, timeout=30)

    assert (said_queued, said_running) == (
        f"Job {queued} is cancelled.",
        f"Job {running} will stop at its next checkpoint.",
    )
    assert first.status.value == second.status.value == "cancelled"
    time.sleep(1.0)  # the revoked message reached the worker: it must not run the job
    assert faults.job(queued).attempts == 0 and faults.job(queued).status.value == "cancelled"
    assert measurement_keys(faults, running) == Counter()


@pytest.fixture
def pg_faults(tmp_path: Path, postgres_server) -> Iterator[tuple[FaultStack, object]]:
    url = postgres_server.create_database()
    stack = FaultStack(tmp_path, url)
    try:
        stack.start_redis()
        yield stack, postgres_server
    finally:
        stack.close()
        postgres_server.drop_database(url)


def pg_worker(pg_faults, tiny_model: Path) -> tuple[FaultStack, object, int]:
    """The PostgreSQL stack with one live worker and a stored model."""
    faults, server = pg_faults
    model_id = add_model_file(faults.factory, faults.settings, tiny_model, name="t").model_id
    faults.start_worker("w1")
    faults.wait_for_workers("w1")
    return faults, server, model_id


def outage(server, seconds: float) -> None:
    server.stop()
    time.sleep(seconds)
    server.start()


def test_a_brief_database_outage_delays_writes_and_the_job_still_succeeds(
    pg_faults, tiny_model: Path
) -> None:
    faults, server, model_id = pg_worker(pg_faults, tiny_model)
    job_id = submit(faults, model_id, lasting(4.0))
    faults.wait_for_job(job_id, {"running"})

    outage(server, 3.0)
    job = faults.wait_for_job(job_id, {"succeeded", "failed", "cancelled"}, timeout=60)

    assert job.status.value == "succeeded", job.message
    assert max(measurement_keys(faults, job_id).values()) == 1


def test_a_long_database_outage_fails_the_job_cleanly(pg_faults, tiny_model: Path) -> None:
    faults, server, model_id = pg_worker(pg_faults, tiny_model)
    job_id = submit(faults, model_id, lasting(30.0))
    faults.wait_for_job(job_id, {"running"})

    outage(server, 20.0)  # past the worker's 15 s retry window (optistudio.db.session.DB_RETRY_S)
    job = faults.wait_for_job(job_id, {"succeeded", "failed", "cancelled"}, timeout=90)

    assert job.status.value == "failed"
    pattern = r"The database (could not be reached for \d+ s|connection was lost) \("
    assert re.match(pattern, job.message), job.message
    assert job.message.endswith("The job was stopped.")
    assert (job.error_code, job.error_hint) == (
        "database_unavailable",
        "Submit it again once the database is back.",
    )
    # The worker lived through it and runs the next job.
    after = faults.wait_for_job(submit(faults, model_id), {"succeeded", "failed"}, timeout=60)
    assert after.status.value == "succeeded", after.message


def test_a_job_delivered_while_the_database_is_down_waits_in_the_queue(
    pg_faults, tiny_model: Path
) -> None:
    faults, server, model_id = pg_worker(pg_faults, tiny_model)
    held: list[list] = []
    job_id = submit_benchmark(
        faults.factory,
        model_id=model_id,
        spec=QUICK,
        send=lambda name, args: held.append([name, args]) or "held",
    )
    server.stop()
    faults.send(*held[0])  # the worker gets it while it cannot claim the row
    time.sleep(20.0)  # past the claim's 15 s retry window: handed back to the broker
    server.start()
    job = faults.wait_for_job(job_id, {"succeeded", "failed", "cancelled"}, timeout=90)

    assert job.status.value == "succeeded", job.message
    assert job.attempts == 1
    assert "could not claim it" in faults.log_path.read_text(errors="replace")
