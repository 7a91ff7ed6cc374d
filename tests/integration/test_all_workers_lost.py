"""The only worker is SIGKILLed mid-job: with no worker left to recover it, the studio and the
CLI say so (never "running" forever), and the job runs again, once, when a worker starts.

Real Redis, real Celery workers (heartbeat 1 s, so a worker is given up after about 3 s), real
SQLite or PostgreSQL, the Jobs page's own script under Streamlit's AppTest and the real CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from faultstack import HEARTBEAT_S, REPO, FaultStack, run_jobs_page, running_stack, wait_until

from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.db.queries import results_rows
from optistudio.db.session import transaction
from optistudio.services.catalog import add_model_file
from optistudio.studio.jobs_services import submit_benchmark
from optistudio.studio.worker_services import check_workers

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.faults]

SLOW = BenchmarkSpec(batch_sizes=[1], warmup_runs=1, min_runs=5, min_seconds=6.0, max_seconds=8.0)
STALE_AFTER_S = 3 * HEARTBEAT_S


@pytest.fixture
def faults(tmp_path: Path, database_url: str) -> Iterator[FaultStack]:
    with running_stack(tmp_path, database_url) as stack:
        yield stack


def cli_jobs(faults: FaultStack, *flags: str) -> str:
    env = dict(
        os.environ,
        OPTISTUDIO_DATA_DIR=str(faults.settings.data_dir),
        OPTISTUDIO_DATABASE_URL=faults.settings.database_url,
        OPTISTUDIO_HEARTBEAT_S=str(HEARTBEAT_S),
    )
    done = subprocess.run(
        [sys.executable, "-m", "optistudio.cli", "jobs", *flags],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def jobs_page_warnings(faults: FaultStack, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The warnings of one run of the Jobs page script (optistudio.studio.views.jobs.render)."""
    app, _ = run_jobs_page(faults, monkeypatch, heartbeat_s=HEARTBEAT_S)
    return [w.value for w in app.warning]


def test_the_only_worker_killed_mid_job_is_reported_then_the_job_runs_once_on_a_new_worker(
    faults: FaultStack, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model_id = add_model_file(faults.factory, faults.settings, tiny_model, name="t").model_id
    faults.start_worker("w1")
    faults.wait_for_workers("w1")
    job_id = submit_benchmark(faults.factory, model_id=model_id, spec=SLOW, send=faults.send)
    faults.wait_for_job(job_id, {"running"})
    time.sleep(1.0)  # well into the measurement

    faults.kill_worker("w1")  # SIGKILL, main process and pool: no worker is left

    def studio_sees_it_queued() -> bool:  # what the Jobs page does on each refresh
        live = check_workers(faults.factory, max_age_s=STALE_AFTER_S)
        return live == 0 and faults.job(job_id).status.value == "queued"

    wait_until(studio_sees_it_queued, "the studio taking the lost job off 'running'", 60)
    lost = faults.job(job_id)
    assert (lost.celery_task_id, lost.attempts) == (None, 1)
    assert lost.message.startswith("Worker lost: its worker (w1@")
    assert lost.message.endswith(
        "stopped responding and no worker is running. Attempt 2 of 3 will start when a "
        "worker starts."
    )
    warnings = jobs_page_warnings(faults, monkeypatch)
    assert any(
        "No worker is running, so 1 unfinished job(s) wait, 1 of them" in w for w in warnings
    )
    listed = json.loads(cli_jobs(faults, "--json"))
    assert listed["live_workers"] == []
    assert [(j["id"], j["status"], j["message"]) for j in listed["jobs"]] == [
        (job_id, "queued", lost.message)
    ]
    assert "No worker is running: 1 unfinished job(s) wait for one." in cli_jobs(faults)

    faults.start_worker("w2")
    done = faults.wait_for_job(job_id, {"succeeded", "failed", "cancelled"}, timeout=120)

    assert done.status.value == "succeeded", done.message
    assert done.worker.startswith("w2@") and done.attempts == 2  # killed once, run once more
    with transaction(faults.factory) as s:
        rows = results_rows(s, job_ids=[job_id])
    keys = Counter((r["batch_size"], r["metric"]) for r in rows)
    assert keys and max(keys.values()) == 1  # one row per metric: nothing stored twice
    log = faults.log_path.read_text(errors="replace")
    assert log.count(f"job {job_id} was queued with no message in the broker") == 1
