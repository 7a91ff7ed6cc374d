"""`optistudio jobs` says where each unfinished job stands, as the Jobs page does: a queued job
behind the job a live worker is busy with, a running one's elapsed time (in process,
tests/cli_runner.py)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

from cli_runner import run_in_process

from optistudio.db.models import Job, JobKind
from optistudio.db.queries import claim_job, create_job, record_worker
from optistudio.db.session import transaction


def test_jobs_places_a_queued_job_behind_the_busy_worker(db_factory, app_settings) -> None:
    with transaction(db_factory) as s:
        running, queued = (
            create_job(s, kind=JobKind.benchmark, spec={}, model_id=None).id for _ in range(2)
        )
        record_worker(s, hostname="celery@box", queues=["cpu"], inventory={})
        claim_job(s, job_id=running, worker="celery@box", task_id="t")
        s.get(Job, running).started_at = datetime.now(UTC) - timedelta(seconds=95)  # type: ignore[union-attr]
    env = {"OPTISTUDIO_DATA_DIR": str(app_settings.data_dir)}

    done = run_in_process(["jobs", "--json"], set_env=env, unset_env=("OPTISTUDIO_DATABASE_URL",))
    text = run_in_process(["jobs"], set_env=env, unset_env=("OPTISTUDIO_DATABASE_URL",))

    standing = {job["id"]: job["standing"] for job in json.loads(done.stdout)["jobs"]}
    assert done.returncode == 0, done.stderr
    assert standing[queued].startswith(
        f"Queued behind 1 job (#{running}): worker celery@box is busy with job #{running} since "
    )
    assert re.fullmatch(
        r"Running for 1 min \d\d s; no estimate until it reports progress\.", standing[running]
    )
    assert "Queued behind 1 job" in text.stdout and "Running for 1 min " in text.stdout
