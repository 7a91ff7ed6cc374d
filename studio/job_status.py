"""What a job's status line says beyond its own message: where a queued job stands among the
workers, and how long a running one has run and has left. Plain functions, no Streamlit.

A queued job is behind every running job and every job queued before it. It waits on its own
only when a worker is alive and idle and still none took it; with no worker alive it waits for
one to start. The Hardware page and these notes read the same heartbeats (`WorkerRecord`).

The estimate is the job's own pace: after `elapsed` seconds at `progress` (0..1) the whole run
takes `elapsed / progress`, so `elapsed * (1 - progress) / progress` is left. Progress steps
are uneven (a calibration, then timing), so it is said as "about", and only from
`MIN_PROGRESS` on and after `LONG_AFTER_S`: before that, elapsed time alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from optistudio.studio.job_view import JobView

LONG_AFTER_S = 10.0
"""A job running this long shows its elapsed time (and an estimate when it can)."""
MIN_PROGRESS = 0.02
"""Below this progress the pace says nothing yet."""
STUCK_AFTER_S = 30.0
"""A queued job nobody took this long, with an idle worker alive, says so."""
START_WORKER = "`make up` starts one; `optistudio worker` adds one."


@dataclass(frozen=True)
class RunningJob:
    job: int
    worker: str
    started_at: datetime | None


@dataclass(frozen=True)
class QueueState:
    """The queue as the database has it: live workers, running jobs, queued job ids."""

    live_workers: tuple[str, ...]
    running: tuple[RunningJob, ...] = ()
    queued: tuple[int, ...] = ()
    now: datetime = field(default_factory=lambda: datetime.now(UTC))

    def busy(self) -> dict[str, RunningJob]:
        """Each live worker running a job: the job it started first."""
        found: dict[str, RunningJob] = {}
        for job in sorted(self.running, key=lambda j: (j.started_at or self.now, j.job)):
            if job.worker in self.live_workers:
                found.setdefault(job.worker, job)
        return found


def duration(seconds: float) -> str:
    """'45 s', '2 min 05 s', '1 h 03 min'."""
    whole = max(int(round(seconds)), 0)
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def queue_note(row: JobView[Any], queue: QueueState, *, lost: bool = False) -> str | None:
    """Where a queued job stands: behind which jobs on which busy worker, waiting for a worker
    to start, or not taken by an idle one. None for a job that is not queued, and for one
    queued again after its worker was lost (`lost`: its own message says so)."""
    if row.status != "queued" or lost:
        return None
    if not queue.live_workers:
        return f"No worker is alive: it starts when one does. {START_WORKER}"
    ahead = [j.job for j in queue.running] + [j for j in queue.queued if j < row.id]
    busy = queue.busy()
    if ahead:
        return f"Queued behind {_jobs(ahead)}" + (f": {_busy(busy, queue.now)}." if busy else ".")
    waited = (queue.now - row.created_at).total_seconds() if row.created_at else 0.0
    if waited <= STUCK_AFTER_S:
        return None
    idle = ", ".join(w for w in queue.live_workers if w not in busy)
    return (
        f"No worker has taken it for {duration(waited)} although {idle} "
        f"{'is' if ', ' not in idle else 'are'} alive and idle: it may wait on a queue no live "
        "worker serves, or the broker lost it (a worker sends such a job again on its next "
        "heartbeat)."
    )


def _jobs(ids: list[int]) -> str:
    shown = ", ".join(f"#{i}" for i in ids[:5]) + (", …" if len(ids) > 5 else "")
    return f"{len(ids)} job{'' if len(ids) == 1 else 's'} ({shown})"


def _busy(busy: dict[str, RunningJob], now: datetime) -> str:
    return "; ".join(
        f"worker {worker} is busy with job #{job.job}" + _since(job.started_at, now)
        for worker, job in sorted(busy.items())
    )


def _since(started: datetime | None, now: datetime) -> str:
    if started is None:
        return ""
    return f" since {started:%H:%M:%S} UTC ({duration((now - started).total_seconds())})"


def timing_note(row: JobView[Any], *, now: datetime | None = None) -> str | None:
    """'Running for 2 min 05 s; about 1 min 30 s left at its pace so far (58% done).' for a job
    running at least `LONG_AFTER_S`; None otherwise."""
    started = row.started_at
    if row.status != "running" or started is None:
        return None
    elapsed = ((now or datetime.now(UTC)) - started).total_seconds()
    if elapsed < LONG_AFTER_S:
        return None
    said = f"Running for {duration(elapsed)}"
    progress = min(max(row.progress, 0.0), 1.0)
    if progress < MIN_PROGRESS:
        return f"{said}; no estimate until it reports progress."
    if progress >= 1.0:
        return f"{said}; finishing."
    left = elapsed * (1.0 - progress) / progress
    return f"{said}; about {duration(left)} left at its pace so far ({progress:.0%} done)."


def status_text(row: JobView[Any], *, now: datetime | None = None) -> str:
    """A job's message (its status when it has none) and, on a long run, its timing:
    'Calibrating… · Running for 1 min 10 s; about 40 s left at its pace so far (64% done).'"""
    text = row.message or row.status
    timing = timing_note(row, now=now)
    return f"{text} · {timing}" if timing else text


def progress_text(row: JobView[Any], *, prefix: str = "Job", now: datetime | None = None) -> str:
    """The text on a job's progress bar: 'Job #7: ' and its `status_text`."""
    return f"{prefix} #{row.id}: {status_text(row, now=now)}"
