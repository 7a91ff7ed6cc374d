"""Job status that knows the workers (issue 44, item 5), on the Jobs page in real headless
Chromium against a real `optistudio up` stack (Redis, one Celery worker, the studio): a job
queued while the only worker runs another says it waits behind that job on that worker and
since when (no "is a worker running?" false alarm), the long job shows its elapsed time and an
estimate from its own progress, and once the worker stops answering (its processes stopped, so
its heartbeat goes stale) the queued job says no worker is alive."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from browser import UI_TIMEOUT_MS, Studio, shot
from seed_models import add_models

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

HEARTBEAT_S = 3
"""This stack's worker heartbeat: the studio counts a worker dead 3 heartbeats (9 s) after its
last, instead of 30 s."""
STACK = {"OPTISTUDIO_HEARTBEAT_S": str(HEARTBEAT_S)}
LONG_S = "300"
"""How long the benchmark times its one batch size: it outlasts the test."""


def submit_long_benchmark(page, studio: Studio, model_id: int, job_id: int) -> None:  # type: ignore[no-untyped-def]
    """The Models page's Benchmark form at one batch size, timed for LONG_S seconds."""
    from playwright.sync_api import expect

    page.goto(f"{studio.url}/models?model={model_id}")
    form = page.get_by_test_id("stForm").filter(has=page.get_by_role("button", name="Benchmark"))
    expect(form).to_be_visible(timeout=UI_TIMEOUT_MS)
    form.get_by_role("textbox", name="Batch sizes").fill("1")
    for field in ("Max seconds (cap)", "Min seconds"):  # the cap first: max >= min holds
        form.get_by_role("spinbutton", name=field).fill(LONG_S)
    form.get_by_role("button", name="Benchmark").click()
    expect(page.get_by_text(f"Benchmark job #{job_id} submitted.")).to_be_visible()


@contextmanager
def worker_stopped(studio: Studio) -> Iterator[None]:
    """The stack's Celery worker and its pool, stopped (SIGSTOP to its process group): alive
    but silent, as a hung worker is; continued afterwards so the stack stops as usual."""
    import psutil

    children = psutil.Process(studio.process.pid).children()
    [worker] = [p for p in children if "celery" in " ".join(p.cmdline())]
    group = os.getpgid(worker.pid)
    os.killpg(group, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(group, signal.SIGCONT)


@pytest.mark.parametrize("studio", [STACK], indirect=True)
def test_a_queued_job_names_the_busy_worker_then_says_none_is_alive(
    studio: Studio, page, app_settings, tiny_model: Path
) -> None:
    from playwright.sync_api import expect

    [model_id] = add_models(app_settings, [tiny_model])
    submit_long_benchmark(page, studio, model_id, 1)
    submit_long_benchmark(page, studio, model_id, 2)  # the one worker runs one job at a time

    page.goto(f"{studio.url}/jobs")
    behind = re.compile(
        r"^Queued behind 1 job \(#1\): worker (\S+@\S+) is busy with job #1 since "
        r"\d\d:\d\d:\d\d UTC \((\d+ s|\d+ min \d\d s)\)\.$"
    )
    note = page.get_by_text(behind)
    expect(note).to_be_visible(timeout=2 * UI_TIMEOUT_MS)  # once the worker took job #1
    worker = behind.match(str(note.inner_text()).strip()).group(1)  # type: ignore[union-attr]
    expect(page.get_by_text(re.compile("Is a worker running|No worker has taken"))).to_have_count(0)

    running = re.compile(  # the long job's bar, after 10 s: elapsed, then its pace's estimate
        r"Job #1 · Benchmark · tiny — .* · Running for (\d+ s|\d+ min \d\d s); about "
        r"(\d+ s|\d+ min \d\d s|\d+ h \d\d min) left at its pace so far \(\d+% done\)\.$"
    )
    expect(page.get_by_text(running)).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(page.get_by_text(behind)).to_be_visible()  # job #2 still waits behind it
    shot(page, "jobs-queued-behind")

    with worker_stopped(studio):
        alive = page.get_by_text("No worker is alive: it starts when one does.", exact=False)
        expect(alive).to_be_visible(timeout=UI_TIMEOUT_MS)  # after 3 missed heartbeats
        waiting = re.compile(r"^No worker is running, so 2 unfinished job\(s\) wait")
        expect(page.get_by_text(waiting)).to_be_visible()
        expect(page.get_by_text(behind)).to_have_count(0)
        expect(page.get_by_text(f"worker {worker} is busy", exact=False)).to_have_count(0)
        shot(page, "jobs-no-worker")
    assert "Traceback" not in page.content()
