"""`optistudio jobs`: the latest jobs as the database has them, and whether any worker runs
(`optistudio jobs delete JOB` is in `optistudio.cli.stored`).

Like the studio's Jobs page, it first takes off "running" the jobs whose worker died while no
worker is live (`optistudio.db.queries.release_orphaned_jobs`), so it never reports such a job as running:
it is queued again with "Worker lost: …", or ended when it must not run again. Needs the
database only (no broker, no Celery).
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from optistudio.cli.output import print_json
from optistudio.cli.stored import add_job_delete_parser

HEARTBEAT_STALE_FACTOR = 3
"""A worker is live while its heartbeat is at most this many intervals old (as in workers)."""


def add_jobs_parser(commands: Any) -> None:
    jobs = commands.add_parser("jobs", help="list the latest jobs and whether a worker runs")
    jobs.add_argument("--limit", type=int, default=20, help="how many jobs (default 20)")
    jobs.add_argument("--json", action="store_true", help="print one JSON object")
    add_job_delete_parser(jobs)


def command_jobs(args: argparse.Namespace) -> int:
    from optistudio.db.queries import list_jobs, live_workers, release_orphaned_jobs
    from optistudio.db.session import make_session_factory, transaction
    from optistudio.services.migrate import upgrade
    from optistudio.services.settings import get_settings
    from optistudio.studio.jobs_services import job_view, queue_state

    settings = get_settings()
    upgrade(settings.database_url, lock_dir=settings.data_dir)
    stale_after_s = settings.heartbeat_s * HEARTBEAT_STALE_FACTOR
    factory = make_session_factory(settings.database_url)
    with transaction(factory) as s:
        release_orphaned_jobs(s, max_age_s=stale_after_s)
        workers = [w.hostname for w in live_workers(s, max_age_s=stale_after_s)]
        listed = [(_job_json(job), job_view(job)) for job in list_jobs(s, limit=args.limit)]
    queue = queue_state(factory, max_age_s=stale_after_s)
    jobs = [said | {"standing": _standing(view, queue)} for said, view in listed]
    if args.json:
        print_json({"live_workers": workers, "jobs": jobs})
    else:
        _print(workers, jobs)
    return 0


def _job_json(job: Any) -> dict[str, Any]:
    return {
        "id": job.id,
        "kind": job.kind.value,
        "status": job.status.value,
        "attempts": job.attempts,
        "worker": job.worker,
        "progress": round(float(job.progress or 0.0), 3),
        "message": job.message or "",
        "error_code": job.error_code,
        "hint": job.error_hint,
        "created_at": _iso(job.created_at),
        "finished_at": _iso(job.finished_at),
    }


def _standing(view: Any, queue: Any) -> str | None:
    """Where an unfinished job stands, as the Jobs page says it (`view`: the job as the page
    reads it): a queued one among the workers, a running one's elapsed time and estimate; None
    otherwise."""
    from optistudio.db.queries import WORKER_LOST
    from optistudio.studio.job_status import queue_note, timing_note

    lost = view.message.startswith(WORKER_LOST)
    return queue_note(view, queue, lost=lost) or timing_note(view, now=queue.now)


def _iso(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).isoformat(timespec="seconds") if moment else None


def _print(workers: list[str], jobs: list[dict[str, Any]]) -> None:
    unfinished = sum(job["status"] in ("queued", "running") for job in jobs)
    if workers:
        print(f"Live workers: {', '.join(workers)}")
    elif unfinished:
        print(
            f"No worker is running: {unfinished} unfinished job(s) wait for one. "
            "Start one with `optistudio worker` (or `optistudio up`)."
        )
    else:
        print("No worker is running.")
    if not jobs:
        print("No jobs yet.")
        return
    print(f"{'job':>5}  {'kind':<16} {'status':<10} {'tries':>5}  message")
    for job in jobs:
        print(
            f"{job['id']:>5}  {job['kind']:<16} {job['status']:<10} {job['attempts']:>5}  "
            f"{job['message']}"
        )
        if job["standing"] and (workers or job["status"] == "running"):  # else said above
            print(f"{'':>5}  {job['standing']}")
        if job["hint"]:
            print(f"{'':>5}  hint: {job['hint']}")
