"""500 jobs in a burst across two real workers: every one ends terminal, none lost or duplicated,
and the Jobs page keeps rendering while they run.

The jobs are cheap on purpose (a tiny model, one short window) so the burst fits CI on two cores:
what is under test is the queue, the claims and the database, not the benchmark. The page time
is the Jobs page's own script (``optistudio.studio.views.jobs.render``, its database queries included) run
by Streamlit's AppTest, timed during the burst and again once the workers are idle with the
same 500 rows; the figures are printed (run with ``-s``) and quoted in docs/RELIABILITY.md.
No timed assertion: a slow page is reported, not failed.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from faultstack import FaultStack, run_jobs_page, wait_until
from sqlalchemy import func, select

from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.db.models import Job, Measurement
from optistudio.db.session import transaction
from optistudio.services.catalog import add_model_file
from optistudio.studio.jobs_services import submit_benchmark

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.faults]

BURST = 500
CHEAP = BenchmarkSpec(
    batch_sizes=[1],
    warmup_runs=0,
    min_runs=1,
    min_seconds=0.0,
    max_seconds=0.02,
    window_seconds=0.005,
    stability_windows=2,
)


@pytest.fixture
def burst_stack(tmp_path: Path) -> Iterator[FaultStack]:
    stack = FaultStack(tmp_path, f"sqlite:///{tmp_path / 'data' / 'optistudio.db'}")
    try:
        stack.start_redis()
        stack.start_worker("w1")
        stack.start_worker("w2")
        stack.wait_for_workers("w1", "w2")
        yield stack
    finally:
        stack.close()


def jobs_page_seconds(stack: FaultStack, monkeypatch: pytest.MonkeyPatch) -> float:
    """Wall time of one run of the Jobs page script; fails on any exception in the page."""
    app, elapsed = run_jobs_page(stack, monkeypatch)
    assert app.title[0].value == "Jobs"
    return elapsed


def test_a_burst_of_500_jobs_on_two_workers_all_end_once(
    burst_stack: FaultStack, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = burst_stack
    model_id = add_model_file(stack.factory, stack.settings, tiny_model, name="tiny").model_id

    started = time.monotonic()
    job_ids = [
        submit_benchmark(stack.factory, model_id=model_id, spec=CHEAP, send=stack.send)
        for _ in range(BURST)
    ]
    submitted_s = time.monotonic() - started

    def terminal_count() -> int:
        with transaction(stack.factory) as s:
            query = select(func.count()).where(Job.status.in_(["succeeded", "failed", "cancelled"]))
            return int(s.scalar(query.select_from(Job)) or 0)

    during = []
    while terminal_count() < BURST and time.monotonic() - started < 600:
        during.append(jobs_page_seconds(stack, monkeypatch))
        time.sleep(0.5)
    wait_until(lambda: terminal_count() == BURST, "every job terminal", timeout=30)
    drained_s = time.monotonic() - started
    idle = [jobs_page_seconds(stack, monkeypatch) for _ in range(5)]

    with transaction(stack.factory) as s:
        jobs = list(s.scalars(select(Job).where(Job.id.in_(job_ids))))
        rows = s.execute(
            select(Measurement.job_id, Measurement.batch_size, Measurement.metric)
        ).all()
    statuses = Counter(job.status.value for job in jobs)
    per_worker = Counter(job.worker.split("@")[0] for job in jobs)
    duplicates = [key for key, n in Counter(rows).items() if n > 1]
    print(
        f"\nburst: {BURST} submitted in {submitted_s:.1f} s, all terminal after {drained_s:.1f} s;"
        f" statuses {dict(statuses)}; per worker {dict(per_worker)};"
        f" attempts>1: {sum(job.attempts > 1 for job in jobs)}; duplicated rows: {len(duplicates)}"
    )
    if during:
        print(
            f"jobs page: {len(during)} renders during the burst, p50 "
            f"{statistics.median(during):.3f} s, max {max(during):.3f} s; idle p50 "
            f"{statistics.median(idle):.3f} s; ratio {statistics.median(during) / statistics.median(idle):.2f}x"
        )

    assert len(jobs) == BURST  # none lost
    assert statuses == Counter({"succeeded": BURST}), [j.message for j in jobs if j.message][:5]
    assert all(job.attempts == 1 for job in jobs)  # none run twice
    assert set(per_worker) == {"w1", "w2"}  # both workers took their share
    assert duplicates == []
    assert {job_id for job_id, _, _ in rows} == set(job_ids)  # every job stored its results
    assert during, "the burst finished before the page could be timed once"
