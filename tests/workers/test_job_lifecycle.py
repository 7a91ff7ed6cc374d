"""run_job against a real (SQLite) database, without a broker: outcomes and their messages."""

from __future__ import annotations

from pathlib import Path

import pytest
from celery.exceptions import SoftTimeLimitExceeded
from sqlalchemy.exc import OperationalError

from optistudio.core.errors import PassFailed
from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.db.models import JobKind, JobStatus
from optistudio.db.queries import request_cancel, results_rows
from optistudio.db.session import DatabaseUnavailable, transaction
from optistudio.workers.work import work_of
from tests.workers.conftest import queue_job, read_job, work_job

benchmark_job = work_of(JobKind.benchmark)
QUICK = BenchmarkSpec(
    batch_sizes=[1, 2],
    warmup_runs=1,
    min_runs=5,
    min_seconds=0.05,
    max_seconds=1.0,
    window_seconds=0.02,
)


def _invalidated() -> OperationalError:
    """A connection that died mid-statement, as SQLAlchemy reports it."""
    error = OperationalError(
        "SELECT 1", {}, Exception("server closed the connection\nunexpectedly")
    )
    error.connection_invalidated = True
    return error


@pytest.fixture
def stored_model(store_model, tiny_model: Path) -> int:  # type: ignore[no-untyped-def]
    return store_model(tiny_model, name="tiny")


def test_benchmark_job_stores_measurements_once_even_when_run_twice(db_factory, stored_model):
    job_id = queue_job(db_factory, JobKind.benchmark, QUICK, stored_model)

    work_job(db_factory, job_id, benchmark_job)
    with transaction(db_factory) as s:
        first = results_rows(s, job_ids=[job_id])
    # A redelivered task finds the job finished and does nothing; a forced rerun replaces rows.
    work_job(db_factory, job_id, benchmark_job)
    benchmark_job(read_job(db_factory, job_id), _NullContext(db_factory, job_id))
    with transaction(db_factory) as s:
        second = results_rows(s, job_ids=[job_id])

    job = read_job(db_factory, job_id)
    assert job.status == JobStatus.succeeded and job.progress == 1.0
    assert job.environment_id is not None
    assert len(first) == len(second) > 0
    assert {(r["batch_size"], r["metric"]) for r in first} >= {(1, "p50_ms"), (2, "p99_ms")}


def test_invalid_spec_fails_with_a_readable_message(db_factory, stored_model):
    job_id = queue_job(
        db_factory, JobKind.benchmark, {"min_runs": -1, "colour": "red"}, stored_model
    )

    work_job(db_factory, job_id, benchmark_job, task_id=None)

    job = read_job(db_factory, job_id)
    assert (job.status, job.error_code) == (JobStatus.failed, "invalid_spec")
    assert "min_runs" in job.message and "colour" in job.message
    assert job.error_detail is None


def test_missing_model_file_fails_cleanly(db_factory, app_settings, stored_model):
    with transaction(db_factory) as s:
        from optistudio.db.queries import get_model

        Path(get_model(s, model_id=stored_model).path).unlink()
    job_id = queue_job(db_factory, JobKind.benchmark, QUICK, stored_model)

    work_job(db_factory, job_id, benchmark_job, task_id=None)

    job = read_job(db_factory, job_id)
    assert (job.status, job.error_code) == (JobStatus.failed, "model_rejected")
    assert "missing" in job.message and "Upload the model again" not in job.message
    assert job.error_hint.startswith("Upload the model again")
    assert job.error_detail is None


def test_an_expected_failure_records_its_code_message_and_hint_apart(db_factory, stored_model):
    job_id = queue_job(db_factory, JobKind.benchmark, {}, stored_model)

    def unsupported(job, context):
        raise PassFailed("int8_static cannot quantize op 'Foo'.", hint="Try the fp16 recipe.")

    work_job(db_factory, job_id, unsupported, task_id=None)

    job = read_job(db_factory, job_id)
    stored = (job.status, job.error_code, job.message, job.error_hint, job.error_detail)
    assert stored == (
        JobStatus.failed,
        "pass_failed",
        "int8_static cannot quantize op 'Foo'.",
        "Try the fp16 recipe.",
        None,
    )


def test_a_bug_is_an_internal_error_with_the_traceback_kept(db_factory, stored_model):
    job_id = queue_job(db_factory, JobKind.benchmark, {}, stored_model)

    def broken(job, context):
        raise ZeroDivisionError("oops")

    with pytest.raises(ZeroDivisionError):
        work_job(db_factory, job_id, broken, task_id=None)

    job = read_job(db_factory, job_id)
    assert (job.status, job.error_code) == (JobStatus.failed, "internal")
    assert job.message == f"Internal error (job {job_id}). The details are in the worker log."
    assert "please report it" in job.error_hint
    assert "ZeroDivisionError" in job.error_detail and "ZeroDivisionError" not in job.message


def test_cancel_requested_while_running_stops_the_job(db_factory, stored_model):
    slow = QUICK.model_copy(update={"min_seconds": 30.0, "max_seconds": 60.0})
    job_id = queue_job(db_factory, JobKind.benchmark, slow, stored_model)

    def cancel_then_run(job, context):
        with transaction(db_factory) as s:
            request_cancel(s, job_id=job.id)
        return benchmark_job(job, context)

    work_job(db_factory, job_id, cancel_then_run, task_id=None)

    job = read_job(db_factory, job_id)
    assert (job.status, job.error_code) == (JobStatus.cancelled, "cancelled")
    assert job.message == "Cancelled while running."
    assert job.finished_at is not None


def test_a_job_past_its_soft_time_limit_is_timed_out(db_factory, stored_model):
    job_id = queue_job(db_factory, JobKind.benchmark, {}, stored_model)

    def too_long(job, context):
        raise SoftTimeLimitExceeded()

    work_job(db_factory, job_id, too_long, task_id=None)

    job = read_job(db_factory, job_id)
    assert (job.status, job.error_code) == (JobStatus.timed_out, "timeout")
    assert job.message.startswith("Timed out") and "OPTISTUDIO_JOB_TIME_LIMIT_S" in job.error_hint
    assert job.is_terminal and job.error_detail is None


@pytest.mark.parametrize(
    ("lost", "says"),
    [
        (DatabaseUnavailable(15, OSError("server closed")), "could not be reached for 15 s"),
        (_invalidated(), "The database connection was lost (server closed the connection)."),
    ],
    ids=["retries-ran-out", "connection-invalidated"],
)
def test_a_lost_database_fails_the_job_with_its_own_code(db_factory, stored_model, lost, says):
    job_id = queue_job(db_factory, JobKind.benchmark, {}, stored_model)

    def database_gone(job, context):
        raise lost

    work_job(db_factory, job_id, database_gone, task_id=None)

    job = read_job(db_factory, job_id)
    assert (job.status, job.error_code) == (JobStatus.failed, "database_unavailable")
    assert says in job.message and job.message.endswith("The job was stopped.")
    assert job.error_hint == "Submit it again once the database is back."


def test_cancelled_queued_job_never_runs(db_factory, stored_model):
    job_id = queue_job(db_factory, JobKind.benchmark, QUICK, stored_model)
    with transaction(db_factory) as s:
        request_cancel(s, job_id=job_id)
    ran = []

    work_job(db_factory, job_id, lambda j, c: ran.append(j), task_id=None)

    assert ran == [] and read_job(db_factory, job_id).status == JobStatus.cancelled


class _NullContext:
    def __init__(self, factory, job_id):
        self.factory, self.job_id = factory, job_id

    def progress(self, fraction: float, message: str) -> None:
        pass
