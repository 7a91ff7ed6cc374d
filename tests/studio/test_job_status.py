"""A job's status line beyond its message: where a queued job stands among the workers, and
elapsed time with an estimate from the job's own pace. Plain functions, then the queue as the
database gives it (`queue_state`), then the Jobs page through AppTest."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.db.queries import claim_job, record_worker
from optistudio.db.session import transaction
from optistudio.services.catalog import add_model_file
from optistudio.studio.job_status import (
    QueueState,
    RunningJob,
    duration,
    progress_text,
    queue_note,
    status_text,
    timing_note,
)
from optistudio.studio.job_view import JobView
from optistudio.studio.jobs_services import queue_state, submit_benchmark

NOW = datetime(2025, 5, 1, 12, 0, 0, tzinfo=UTC)


def row(job: int, status: str, **fields: Any) -> JobView[None]:
    created = NOW - timedelta(seconds=70)
    return JobView(id=job, kind="Benchmark", status=status, **({"created_at": created} | fields))


def test_a_queued_job_behind_a_busy_worker_names_the_worker_and_since_when() -> None:
    queue = QueueState(
        live_workers=("celery@box",),
        running=(RunningJob(4, "celery@box", NOW - timedelta(seconds=130)),),
        queued=(5, 6),
        now=NOW,
    )

    note = queue_note(row(6, "queued"), queue)

    assert note == (
        "Queued behind 2 jobs (#4, #5): worker celery@box is busy with job #4 since 11:57:50 "
        "UTC (2 min 10 s)."
    )
    assert "Is a worker running" not in note


def test_with_no_worker_alive_a_queued_job_says_it_waits_for_one() -> None:
    queue = QueueState(live_workers=(), queued=(6,), now=NOW)

    assert queue_note(row(6, "queued"), queue) == (
        "No worker is alive: it starts when one does. `make up` starts one; `optistudio worker` "
        "adds one."
    )


def test_an_idle_live_worker_that_took_nothing_is_said_only_after_the_wait() -> None:
    queue = QueueState(live_workers=("celery@a",), queued=(6,), now=NOW)
    fresh = row(6, "queued", created_at=NOW - timedelta(seconds=5))

    stuck = queue_note(row(6, "queued"), queue)

    assert queue_note(fresh, queue) is None
    assert stuck is not None
    assert stuck.startswith("No worker has taken it for 1 min 10 s although celery@a is alive")


def test_running_jobs_of_a_worker_no_longer_alive_still_count_as_ahead() -> None:
    queue = QueueState(
        live_workers=("celery@b",),
        running=(RunningJob(3, "celery@gone", NOW - timedelta(seconds=10)),),
        queued=(7,),
        now=NOW,
    )

    assert queue_note(row(7, "queued"), queue) == "Queued behind 1 job (#3)."


@pytest.mark.parametrize(
    ("status", "lost"), [("running", False), ("succeeded", False), ("queued", True)]
)
def test_only_a_queued_job_that_was_not_lost_gets_a_queue_note(status: str, lost: bool) -> None:
    queue = QueueState(live_workers=(), now=NOW)

    assert queue_note(row(1, status), queue, lost=lost) is None


@pytest.mark.parametrize(
    ("elapsed", "progress", "said"),
    [
        (5, 0.5, None),
        (40, 0.0, "Running for 40 s; no estimate until it reports progress."),
        (
            120,
            0.25,
            "Running for 2 min 00 s; about 6 min 00 s left at its pace so far (25% done).",
        ),
        (
            3600,
            0.5,
            "Running for 1 h 00 min; about 1 h 00 min left at its pace so far (50% done).",
        ),
        (30, 1.0, "Running for 30 s; finishing."),
    ],
    ids=["short", "no-progress", "quarter", "hour", "done"],
)
def test_a_long_running_job_shows_elapsed_time_and_an_estimate_from_its_pace(
    elapsed: int, progress: float, said: str | None
) -> None:
    running = row(1, "running", started_at=NOW - timedelta(seconds=elapsed), progress=progress)

    assert timing_note(running, now=NOW) == said


def test_the_progress_text_carries_the_message_and_the_timing() -> None:
    running = row(
        9, "running", message="Calibrating…", progress=0.5, started_at=NOW - timedelta(seconds=20)
    )

    text = progress_text(running, prefix="Video job", now=NOW)

    assert text == (
        "Video job #9: Calibrating… · Running for 20 s; about 20 s left at its pace so far "
        "(50% done)."
    )
    assert status_text(row(2, "queued"), now=NOW) == "queued"


@pytest.mark.parametrize(
    ("seconds", "said"), [(0, "0 s"), (59.4, "59 s"), (65, "1 min 05 s"), (7380, "2 h 03 min")]
)
def test_durations_read_in_the_largest_units(seconds: float, said: str) -> None:
    assert duration(seconds) == said


def test_the_queue_state_reads_live_workers_running_and_queued_jobs(
    db_factory, app_settings, tiny_model
) -> None:
    model_id = add_model_file(db_factory, app_settings, tiny_model, name="tiny").model_id
    first, second = (
        submit_benchmark(db_factory, model_id=model_id, spec=BenchmarkSpec(), send=lambda n, a: "t")
        for _ in range(2)
    )
    with transaction(db_factory) as s:
        record_worker(s, hostname="celery@box", queues=["cpu"], inventory={})
        record_worker(s, hostname="celery@old", queues=["cpu"], inventory={})
        claim_job(s, job_id=first, worker="celery@box", task_id="t")
    with transaction(db_factory) as s:  # a heartbeat long ago: no longer alive
        from optistudio.db.models import WorkerRecord

        old = s.query(WorkerRecord).filter_by(hostname="celery@old").one()
        old.heartbeat_at = datetime.now(UTC) - timedelta(minutes=10)

    queue = queue_state(db_factory, max_age_s=30)

    assert queue.live_workers == ("celery@box",)
    assert [(j.job, j.worker) for j in queue.running] == [(first, "celery@box")]
    assert queue.queued == (second,)
    note = queue_note(row(second, "queued"), queue)
    assert note is not None and note.startswith(
        f"Queued behind 1 job (#{first}): worker celery@box is busy with job #{first} since"
    )
