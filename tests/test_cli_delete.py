"""`optistudio models`, `models delete`, `results delete` and `jobs delete`, in process
(tests/cli_runner.py), on a data folder whose models were stored through the catalogue."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_in_process

from optistudio.db.models import JobKind, JobStatus
from optistudio.db.queries import (
    MeasurementRow,
    claim_job,
    create_job,
    finish_job,
    list_models,
    replace_measurements,
)
from optistudio.db.session import transaction
from optistudio.services.artifact_store import model_folder
from optistudio.services.catalog import add_model_file


def optistudio(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    return run_in_process(
        list(args), set_env={"OPTISTUDIO_DATA_DIR": str(data_dir)},
        unset_env=("OPTISTUDIO_DATABASE_URL",),
    )  # fmt: skip


def add_job(factory: Any, model_id: int, status: JobStatus) -> int:
    with transaction(factory) as s:
        job_id = create_job(s, kind=JobKind.benchmark, spec={}, model_id=model_id).id
        claim_job(s, job_id=job_id, worker="celery@box", task_id=f"t{job_id}")
        if status is JobStatus.succeeded:
            row = MeasurementRow("onnxruntime", 1, 1, "latency_p50", 1.0, "ms")
            replace_measurements(s, job_id=job_id, rows=[row])
        if status is not JobStatus.running:
            finish_job(s, job_id=job_id, status=status, message="done")
    return job_id


@pytest.fixture
def stored(db_factory, app_settings, make_model) -> dict[str, Any]:
    """A model with a variant, a result and a failed job on it."""
    model = add_model_file(db_factory, app_settings, make_model("a.onnx"), name="a")
    variant = add_model_file(
        db_factory, app_settings, make_model("b.onnx", features=8), name="a · int8",
        origin="variant", parent_id=model.model_id,
    )  # fmt: skip
    return {
        "model": model.model_id,
        "variant": variant.model_id,
        "result": add_job(db_factory, model.model_id, JobStatus.succeeded),
        "failed": add_job(db_factory, variant.model_id, JobStatus.failed),
        "folder": model_folder(app_settings.artifact_dir, model.info.sha256),
        "data": app_settings.data_dir,
    }


def test_models_lists_what_each_occupies_on_disk(stored) -> None:
    done = optistudio("models", "--json", data_dir=stored["data"])

    rows = {row["id"]: row for row in json.loads(done.stdout)["models"]}

    assert done.returncode == 0, done.stderr
    original, variant = rows[stored["model"]], rows[stored["variant"]]
    assert original["on_disk_bytes"] > variant["on_disk_bytes"] > 0  # it frees its variant too
    assert original["on_disk"].startswith("1 variant, 1 result, 2 jobs, ")
    assert variant["parent_id"] == stored["model"]


def test_without_yes_a_delete_only_says_what_it_would_free(db_factory, stored) -> None:
    done = optistudio("models", "delete", str(stored["model"]), "--json", data_dir=stored["data"])
    text = optistudio("models", "delete", str(stored["model"]), data_dir=stored["data"])

    payload = json.loads(done.stdout)
    assert done.returncode == text.returncode == 0, done.stderr
    assert payload["deleted"] is False
    assert payload["sentence"].startswith(f"Deletes model #{stored['model']} a: 1 variant, ")
    assert payload["job_ids"] == [stored["result"], stored["failed"]]
    assert payload["bytes_on_disk"] == sum(payload["bytes_by_part"].values()) > 0
    assert text.stdout.splitlines()[-1] == "Nothing deleted: run it again with --yes to delete."
    assert stored["folder"].is_dir()
    with transaction(db_factory) as s:
        assert len(list_models(s)) == 2


def test_with_yes_the_model_its_variant_jobs_and_files_go(db_factory, stored) -> None:
    done = optistudio(
        "models", "delete", str(stored["model"]), "--yes", "--json", data_dir=stored["data"]
    )

    payload = json.loads(done.stdout)
    assert done.returncode == 0, done.stderr
    assert payload["deleted"] is True
    assert payload["model_ids"] == [stored["model"], stored["variant"]]
    assert not stored["folder"].exists()
    with transaction(db_factory) as s:
        assert list_models(s) == []
    again = optistudio("models", "delete", str(stored["model"]), "--json", data_dir=stored["data"])
    assert again.returncode == 2
    assert json.loads(again.stdout)["error"]["message"] == f"No model #{stored['model']} is stored."


def test_a_result_and_a_job_are_deleted_by_their_job_id(stored) -> None:
    refused = optistudio(
        "results", "delete", str(stored["failed"]), "--yes", "--json", data_dir=stored["data"]
    )
    job = optistudio("jobs", "delete", str(stored["failed"]), "--yes", data_dir=stored["data"])
    result = optistudio(
        "results", "delete", str(stored["result"]), "--yes", data_dir=stored["data"]
    )
    listed = optistudio("jobs", "--json", data_dir=stored["data"])

    assert refused.returncode == 2
    assert json.loads(refused.stdout)["error"]["message"] == (
        f"Job {stored['failed']} has no result to delete (it is failed)."
    )
    assert job.returncode == result.returncode == 0, job.stderr + result.stderr
    assert job.stdout.startswith(f"Deleted job #{stored['failed']}: freed 1 job, ")
    assert result.stdout.startswith(
        f"Deleted the result of job #{stored['result']}: freed 1 result, 1 job, "
    )
    assert json.loads(listed.stdout)["jobs"] == []


def test_a_running_job_refuses_the_delete_with_exit_2(db_factory, stored) -> None:
    running = add_job(db_factory, stored["variant"], JobStatus.running)

    done = optistudio(
        "models", "delete", str(stored["model"]), "--yes", "--json", data_dir=stored["data"]
    )

    assert done.returncode == 2
    error = json.loads(done.stdout)["error"]
    assert error["message"] == f"Job {running} is running: cancel it first. Nothing was deleted."
    assert "Jobs page" in error["hint"] and "error: Job" in done.stderr
    assert stored["folder"].is_dir()
