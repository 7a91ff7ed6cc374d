"""Jobs without Streamlit: submit, cancel, and the one row every page reads a job as."""

from __future__ import annotations

import pytest

from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.db.models import JobKind
from optistudio.services.catalog import add_model_file
from optistudio.studio.jobs_services import (
    cancel_job,
    job_rows,
    job_spec,
    recent_jobs,
    submit_benchmark,
)


@pytest.fixture
def model_id(db_factory, app_settings, tiny_model) -> int:
    return add_model_file(db_factory, app_settings, tiny_model, name="tiny").model_id


def test_cancel_outcomes(db_factory, model_id) -> None:
    revoked = []
    queued = submit_benchmark(
        db_factory, model_id=model_id, spec=BenchmarkSpec(), send=lambda name, args: "task-q"
    )

    first = cancel_job(db_factory, job_id=queued, revoke=revoked.append)
    again = cancel_job(db_factory, job_id=queued, revoke=revoked.append)

    assert first == f"Job {queued} is cancelled."
    assert revoked == ["task-q"]
    assert again == f"Job {queued} had already finished (cancelled)."
    assert cancel_job(db_factory, job_id=999, revoke=revoked.append) == "Job 999 does not exist."
    assert [r["status"] for r in job_rows(db_factory)] == ["cancelled"]


def test_the_jobs_page_and_the_other_pages_read_the_same_job_row(db_factory, model_id) -> None:
    sent: list[tuple[str, list]] = []
    spec = BenchmarkSpec(batch_sizes=[1, 2])
    job_id = submit_benchmark(
        db_factory, model_id=model_id, spec=spec, send=lambda n, a: sent.append((n, a)) or "t-1"
    )

    [listed] = job_rows(db_factory)
    [recent] = recent_jobs(db_factory, kind=JobKind.benchmark, model_id=model_id)

    assert recent == listed | {"result": None}  # queued: no result yet
    assert (listed["job"], listed["model"], listed["status"]) == (job_id, "tiny", "queued")
    assert listed["kind"] == "Benchmark" and sent == [("optistudio.benchmark", [job_id])]
    assert job_spec(db_factory, job_id=job_id)["batch_sizes"] == [1, 2]
    assert job_spec(db_factory, job_id=job_id + 1) == {}
