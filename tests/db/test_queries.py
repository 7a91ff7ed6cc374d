"""Query functions against a migrated SQLite database."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy.orm import Session, sessionmaker

from optistudio.db import queries
from optistudio.db.models import JobKind, JobStatus, Model
from optistudio.db.queries import MeasurementRow
from optistudio.db.session import make_session_factory, transaction

ALEMBIC_INI = Path(__file__).resolve().parents[2] / "alembic.ini"

ROWS = [
    MeasurementRow("onnxruntime", 1, 4, "latency_p50", 1.5, "ms"),
    MeasurementRow("onnxruntime", 1, 4, "throughput", 640.0, "items/s"),
    MeasurementRow("onnxruntime", 8, 4, "latency_p50", 6.0, "ms"),
]


@pytest.fixture
def factory(database_url: str) -> Iterator[sessionmaker[Session]]:
    url = database_url  # SQLite and PostgreSQL (tests/conftest.py)
    cfg = Config(str(ALEMBIC_INI))
    cfg.attributes.update(url=url, configure_logger=False)
    command.upgrade(cfg, "head")
    factory = make_session_factory(url)
    yield factory
    factory.kw["bind"].dispose()


def add_model(s: Session, sha256: str = "a" * 64, name: str = "resnet") -> tuple[int, bool]:
    model, created = queries.get_or_create_model(
        s,
        sha256=sha256,
        name=name,
        filename=f"{name}.onnx",
        path=f"/data/models/{sha256}.onnx",
        size_bytes=1234,
        info={"opset": 17},
    )
    return model.id, created


def add_job(factory: sessionmaker[Session], model_id: int | None = None) -> int:
    with transaction(factory) as s:
        return queries.create_job(
            s, kind=JobKind.benchmark, spec={"runs": 10}, model_id=model_id
        ).id


def claim(factory: sessionmaker[Session], job_id: int) -> int | None:
    with transaction(factory) as s:
        job = queries.claim_job(s, job_id=job_id, worker="w1", task_id="t1")
        return None if job is None else job.id


def test_model_is_deduplicated_by_sha256(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as s:
        first_id, first_created = add_model(s)
    with transaction(factory) as s:
        second_id, second_created = add_model(s, name="renamed")
        models = queries.list_models(s)

    assert (first_created, second_created) == (True, False)
    assert second_id == first_id
    assert [m.name for m in models] == ["resnet"]


def test_concurrent_model_insert_falls_back_to_the_winner(
    factory: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    with transaction(factory) as s:
        winner_id, _ = add_model(s)
    real_lookup = queries._model_by_sha256
    lookups: list[str] = []

    def first_lookup_misses(s: Session, sha256: str) -> Model | None:
        lookups.append(sha256)  # as if the other writer had not committed yet
        return None if len(lookups) == 1 else real_lookup(s, sha256)

    monkeypatch.setattr(queries, "_model_by_sha256", first_lookup_misses)

    with transaction(factory) as s:
        model_id, created = add_model(s)

    assert (model_id, created) == (winner_id, False)
    assert len(lookups) == 2  # the insert hit the unique constraint and looked again


def test_list_models_is_newest_first(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as s:
        add_model(s, "a" * 64, "old")
        add_model(s, "b" * 64, "new")
        names = [m.name for m in queries.list_models(s)]

    assert names == ["new", "old"]


def test_environment_is_deduplicated_by_canonical_json(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as s:
        first = queries.get_or_create_environment(s, data={"ort": "1.20", "cpu": "x86"})
        second = queries.get_or_create_environment(s, data={"cpu": "x86", "ort": "1.20"})
        other = queries.get_or_create_environment(s, data={"cpu": "arm", "ort": "1.20"})

    assert second.id == first.id
    assert other.id != first.id
    assert len(first.fingerprint) == 64


def test_job_lifecycle_queued_running_succeeded(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as s:
        model_id, _ = add_model(s)
    job_id = add_job(factory, model_id)

    with transaction(factory) as s:
        assert queries.get_job(s, job_id=job_id).status is JobStatus.queued
    assert claim(factory, job_id) == job_id
    with transaction(factory) as s:
        assert queries.set_progress(s, job_id=job_id, progress=1.7, message="Timing") is False
        env = queries.get_or_create_environment(s, data={"ort": "1.20"})
        queries.finish_job(s, job_id=job_id, status=JobStatus.succeeded, environment_id=env.id)
    with transaction(factory) as s:
        job = queries.get_job(s, job_id=job_id)

    assert job.status is JobStatus.succeeded
    assert (job.progress, job.attempts, job.worker, job.celery_task_id) == (1.0, 1, "w1", "t1")
    assert job.environment_id == env.id
    assert job.started_at.tzinfo is UTC
    assert job.started_at <= job.heartbeat_at <= job.finished_at


def test_progress_is_clamped_and_heartbeats(factory: sessionmaker[Session]) -> None:
    job_id = add_job(factory)
    claim(factory, job_id)

    with transaction(factory) as s:
        queries.set_progress(s, job_id=job_id, progress=-0.5, message="Loading")
    with transaction(factory) as s:
        job = queries.get_job(s, job_id=job_id)

    assert (job.progress, job.message) == (0.0, "Loading")
    assert job.heartbeat_at is not None


@pytest.mark.parametrize("terminal", [JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled])
def test_claiming_a_terminal_job_does_nothing(
    factory: sessionmaker[Session], terminal: JobStatus
) -> None:
    job_id = add_job(factory)
    with transaction(factory) as s:
        queries.finish_job(s, job_id=job_id, status=terminal, message="done")

    assert claim(factory, job_id) is None
    with transaction(factory) as s:
        job = queries.get_job(s, job_id=job_id)
    assert (job.status, job.attempts) == (terminal, 0)


def test_a_redelivered_running_job_is_claimed_again(factory: sessionmaker[Session]) -> None:
    job_id = add_job(factory)
    claim(factory, job_id)

    assert claim(factory, job_id) == job_id
    with transaction(factory) as s:
        assert queries.get_job(s, job_id=job_id).attempts == 2


def test_cancelling_a_queued_job_cancels_it_at_once(factory: sessionmaker[Session]) -> None:
    job_id = add_job(factory)

    with transaction(factory) as s:
        job = queries.request_cancel(s, job_id=job_id)

    assert job.status is JobStatus.cancelled
    assert (job.message, job.error_code) == ("Cancelled before it started.", "cancelled")
    assert job.finished_at is not None
    assert claim(factory, job_id) is None


def test_cancelling_a_running_job_asks_it_to_stop(factory: sessionmaker[Session]) -> None:
    job_id = add_job(factory)
    claim(factory, job_id)

    with transaction(factory) as s:
        job = queries.request_cancel(s, job_id=job_id)
    with transaction(factory) as s:
        cancel_seen = queries.set_progress(s, job_id=job_id, progress=0.5, message="Timing")

    assert (job.status, job.cancel_requested) == (JobStatus.running, True)
    assert cancel_seen is True


def test_a_pending_cancel_is_honoured_on_redelivery(factory: sessionmaker[Session]) -> None:
    job_id = add_job(factory)
    claim(factory, job_id)
    with transaction(factory) as s:
        queries.request_cancel(s, job_id=job_id)

    assert claim(factory, job_id) is None
    with transaction(factory) as s:
        assert queries.get_job(s, job_id=job_id).status is JobStatus.cancelled


def test_cancelling_a_finished_job_changes_nothing(factory: sessionmaker[Session]) -> None:
    job_id = add_job(factory)
    with transaction(factory) as s:
        queries.finish_job(s, job_id=job_id, status=JobStatus.failed, message="Unsupported op")

    with transaction(factory) as s:
        job = queries.request_cancel(s, job_id=job_id)
        missing = queries.request_cancel(s, job_id=job_id + 1)

    assert (job.status, job.message, job.cancel_requested) == (
        JobStatus.failed,
        "Unsupported op",
        False,
    )
    assert missing is None


def test_finish_job_keeps_an_errors_code_and_hint_apart_from_its_message(
    factory: sessionmaker[Session],
) -> None:
    job_id = add_job(factory)
    claim(factory, job_id)

    with transaction(factory) as s:
        queries.finish_job(
            s,
            job_id=job_id,
            status=JobStatus.timed_out,
            message="Timed out.",
            error_code="timeout",
            error_hint="Make the run shorter.",
        )

    with transaction(factory) as s:
        job = queries.get_job(s, job_id=job_id)
        stored = (job.status, job.message, job.error_code, job.error_hint, job.is_terminal)
    assert stored == (JobStatus.timed_out, "Timed out.", "timeout", "Make the run shorter.", True)
    assert claim(factory, job_id) is None  # timed out is final


def test_a_job_given_up_on_says_so_with_a_code_and_a_hint(factory: sessionmaker[Session]) -> None:
    job_id = add_job(factory)
    for _ in range(queries.MAX_ATTEMPTS):
        claim(factory, job_id)

    assert claim(factory, job_id) is None  # a redelivery after the last attempt ends it

    with transaction(factory) as s:
        job = queries.get_job(s, job_id=job_id)
        stored = (job.status, job.error_code, job.error_hint)
        message = job.message
    assert stored == (JobStatus.failed, "worker_lost", queries.GAVE_UP_HINT)
    assert message.startswith(f"Failed after {queries.MAX_ATTEMPTS} attempts")


def test_the_error_codes_db_writes_are_core_error_codes() -> None:
    from optistudio.core.errors import ErrorCode

    written = {queries.CODE_CANCELLED, queries.CODE_WORKER_LOST}

    assert written <= {code.value for code in ErrorCode}


def test_finish_job_rejects_a_non_terminal_status(factory: sessionmaker[Session]) -> None:
    job_id = add_job(factory)

    with transaction(factory) as s, pytest.raises(ValueError, match="running"):
        queries.finish_job(s, job_id=job_id, status=JobStatus.running)


def test_replace_measurements_is_idempotent(factory: sessionmaker[Session]) -> None:
    job_id = add_job(factory)

    counts = []
    for _ in range(2):
        with transaction(factory) as s:
            counts.append(queries.replace_measurements(s, job_id=job_id, rows=ROWS))
    with transaction(factory) as s:
        queries.finish_job(s, job_id=job_id, status=JobStatus.succeeded)
        stored = queries.results_rows(s, job_ids=[job_id])

    assert counts == [3, 3]
    assert len(stored) == 3


def test_results_rows_joins_job_and_model_for_succeeded_jobs_only(
    factory: sessionmaker[Session],
) -> None:
    with transaction(factory) as s:
        model_id, _ = add_model(s)
        other_model_id, _ = add_model(s, "b" * 64, "bert")
        env = queries.get_or_create_environment(s, data={"ort": "1.20"})
    done, failed, other = (add_job(factory, m) for m in (model_id, model_id, other_model_id))
    for job_id, status in ((done, JobStatus.succeeded), (failed, JobStatus.failed)):
        with transaction(factory) as s:
            queries.replace_measurements(s, job_id=job_id, rows=ROWS[:1])
            queries.finish_job(s, job_id=job_id, status=status, environment_id=env.id)
    with transaction(factory) as s:
        queries.replace_measurements(s, job_id=other, rows=ROWS)
        queries.finish_job(s, job_id=other, status=JobStatus.succeeded)

    with transaction(factory) as s:
        by_model = queries.results_rows(s, model_id=model_id)
        by_jobs = queries.results_rows(s, job_ids=[failed, other])
        everything = queries.results_rows(s)

    assert len(by_model) == 1
    row = by_model[0]
    assert row["finished_at"].tzinfo is UTC
    assert {k: v for k, v in row.items() if k != "finished_at"} == {
        "job_id": done,
        "model_id": model_id,
        "model_name": "resnet",
        "backend": "onnxruntime",
        "batch_size": 1,
        "threads": 4,
        "metric": "latency_p50",
        "value": 1.5,
        "unit": "ms",
        "environment_id": env.id,
    }
    assert {r["job_id"] for r in by_jobs} == {other}
    assert len(everything) == 1 + len(ROWS)


def test_list_jobs_is_newest_first_with_model_loaded(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as s:
        model_id, _ = add_model(s)
    first, second = add_job(factory, model_id), add_job(factory, model_id)

    with transaction(factory) as s:
        jobs = queries.list_jobs(s, limit=10)

    assert [j.id for j in jobs] == [second, first]
    assert jobs[0].model.name == "resnet"  # readable after the session closed: eager load


def test_set_task_id(factory: sessionmaker[Session]) -> None:
    job_id = add_job(factory)

    with transaction(factory) as s:
        queries.set_task_id(s, job_id=job_id, task_id="celery-123")
    with transaction(factory) as s:
        assert queries.get_job(s, job_id=job_id).celery_task_id == "celery-123"


def test_transaction_rolls_back_on_error(factory: sessionmaker[Session]) -> None:
    with pytest.raises(RuntimeError), transaction(factory) as s:
        add_model(s)
        raise RuntimeError("boom")

    with transaction(factory) as s:
        assert queries.list_models(s) == []
