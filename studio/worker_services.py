"""The workers as the studio sees them: what each offers, its rows on the Hardware page, how
many are live."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from optistudio.core.backends.inventory import int8_mode
from optistudio.db.queries import list_workers, live_workers, release_orphaned_jobs
from optistudio.db.session import DatabaseUnavailable, transaction

log = logging.getLogger(__name__)

RELEASE_LOCK_WAIT_S = 1.0
"""How long a page waits for the database's write lock to take a dead worker's jobs off
"running" before it shows the page without (the next rerun tries again): a worker stopped in
the middle of a write holds SQLite's lock, and the page must still say what it can read."""


def offer_summary(hostname: str, inventory: dict[str, Any]) -> str:
    """'host: onnxruntime (cpu), openvino (cpu)': the backends a worker's inventory offers."""
    offered = [
        f"{name} ({', '.join(entry['devices'])})"
        for name, entry in inventory.get("backends", {}).items()
        if entry.get("available")
    ]
    return f"{hostname}: {', '.join(offered) or 'nothing available'}"


def worker_rows(factory: sessionmaker[Session], *, max_age_s: float) -> list[dict[str, Any]]:
    """Every worker seen, with live / stale / stopped and what it offers."""
    now = datetime.now(UTC)
    with transaction(factory, read_only=True) as s:
        rows = []
        for worker in list_workers(s):
            age = (now - worker.heartbeat_at).total_seconds()
            state = "stopped" if worker.stopped_at else ("live" if age <= max_age_s else "stale")
            rows.append(
                {
                    "worker": worker.hostname,
                    "state": state,
                    "queues": ", ".join(worker.queues),
                    "last heartbeat (s ago)": round(age, 1),
                    "offers": offer_summary(worker.hostname, worker.inventory).split(": ", 1)[1],
                    "cpu": worker.inventory.get("cpu", {}).get("model", ""),
                    "isa": " ".join(worker.inventory.get("cpu", {}).get("isa_flags", [])),
                    "int8": int8_mode(worker.inventory).label(),
                    "gpus": _gpu_summary(worker.inventory.get("gpus", [])),
                    "unavailable": "; ".join(
                        f"{name}: {entry['reason']}"
                        for name, entry in worker.inventory.get("backends", {}).items()
                        if not entry.get("available")
                    ),
                }
            )
        return rows


def _gpu_summary(gpus: list[dict[str, Any]]) -> str:
    if not gpus:
        return "none"
    return ", ".join(
        f"cuda:{gpu['index']} {gpu['name']} ({gpu['memory_mib'] / 1024:.0f} GiB, driver "
        f"{gpu['driver']})"
        for gpu in gpus
    )


def check_workers(factory: sessionmaker[Session], *, max_age_s: float) -> int:
    """How many workers are live, read without waiting on a writer. With none, jobs whose worker
    died come off "running" here (``optistudio.db.queries.release_orphaned_jobs``): no worker is
    there to notice until one starts. That write waits at most ``RELEASE_LOCK_WAIT_S`` for the
    lock, and is left for the next call when a stalled writer holds it."""
    with transaction(factory, read_only=True) as s:
        live = len(live_workers(s, max_age_s=max_age_s))
    if not live:
        try:
            with transaction(factory, retry_s=0, lock_wait_s=RELEASE_LOCK_WAIT_S) as s:
                release_orphaned_jobs(s, max_age_s=max_age_s)
        except DatabaseUnavailable as exc:
            log.warning("left the dead workers' jobs for the next look: %s", exc)
    return live
