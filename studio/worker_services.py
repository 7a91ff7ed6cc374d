"""The workers as the studio sees them: what each offers, its rows on the Hardware page, how
many are live."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from optistudio.core.backends.inventory import int8_mode
from optistudio.db.queries import list_workers, live_workers, release_orphaned_jobs
from optistudio.db.session import transaction


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
    with transaction(factory) as s:
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
    """How many workers are live. With none, jobs whose worker died come off "running" here
    (``optistudio.db.queries.release_orphaned_jobs``): no worker is there to notice until one starts."""
    with transaction(factory) as s:
        release_orphaned_jobs(s, max_age_s=max_age_s)
        return len(live_workers(s, max_age_s=max_age_s))
