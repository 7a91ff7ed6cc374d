"""Each worker records what it can serve at start and on a heartbeat, so jobs can be routed.

The heartbeat runs in a daemon thread of the worker's main process; a worker that dies stops
beating and is shown as stale after HEARTBEAT_STALE_FACTOR intervals. Each beat also vouches
for the jobs this worker is running and recovers jobs that lost theirs (``optistudio.workers.recovery``).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from typing import Any

from celery.signals import worker_ready, worker_shutdown

from optistudio.db.queries import record_worker, stop_worker
from optistudio.db.session import make_session_factory, transaction
from optistudio.services.settings import get_settings
from optistudio.workers.recovery import recover, vouch_for_active_jobs

log = logging.getLogger(__name__)

HEARTBEAT_STALE_FACTOR = 3
_stop = threading.Event()
_state: dict[str, Any] = {}
NO_FORK_NOW = threading.Lock()
"""Held by the heartbeat thread while it uses the database, and taken by every fork of this
process (a new pool process) first. A process forked while another of its threads holds a
SQLite write transaction inherits SQLite's in-process lock table in that state, and its own
connections then find the database locked forever (seen: a replacement pool process that
could not claim any job)."""
os.register_at_fork(
    before=NO_FORK_NOW.acquire,
    after_in_parent=NO_FORK_NOW.release,
    after_in_child=NO_FORK_NOW.release,
)


def queues_of(text: str) -> list[str]:
    return [queue.strip() for queue in text.split(",") if queue.strip()]


@worker_ready.connect
def start_heartbeat(sender: Any = None, **kwargs: Any) -> None:
    settings = get_settings()
    offered = queues_of(settings.backends) or None
    _state.update(
        hostname=getattr(sender, "hostname", None) or "worker",
        inventory=inventory_in_subprocess(offered),
        factory=make_session_factory(settings.database_url),
    )
    beat()
    try:
        _recover()
    except Exception:  # the next beat tries again
        log.exception("recovering stale jobs failed")
    thread = threading.Thread(target=_beat_forever, args=(settings.heartbeat_s,), daemon=True)
    thread.start()


@worker_shutdown.connect
def record_shutdown(**kwargs: Any) -> None:
    _stop.set()
    if "factory" in _state:
        with transaction(_state["factory"]) as s:
            stop_worker(s, hostname=_state["hostname"])


def inventory_in_subprocess(offered: list[str] | None) -> dict[str, Any]:
    """The inventory, taken in a throw-away process.

    Checking availability starts runtimes (OpenVINO's thread pool, CUDA); doing that in the
    worker's main process would leave threads behind in every pool child forked later.
    """
    code = (
        "import json, sys; from optistudio.core.backends.inventory import hardware_inventory; "
        "print(json.dumps(hardware_inventory(json.loads(sys.argv[1]) or None)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(offered or [])],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    inventory: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return inventory


def beat() -> None:
    """Write this worker's row now, and the heartbeat of the jobs it is running."""
    settings = get_settings()
    with transaction(_state["factory"]) as s:
        record_worker(
            s,
            hostname=_state["hostname"],
            queues=queues_of(settings.queues),
            inventory=_state["inventory"],
        )
    vouch_for_active_jobs(_state["factory"], worker=_state["hostname"])


def _recover() -> None:
    """Run again (or end) the jobs of workers that stopped responding, and send again the
    queued jobs the broker does not hold."""
    recover(
        _state["factory"],
        max_age_s=get_settings().heartbeat_s * HEARTBEAT_STALE_FACTOR,
        worker=_state["hostname"],
    )


def _beat_forever(interval: float) -> None:
    while not _stop.wait(interval):
        for step in (beat, _recover):
            try:
                with NO_FORK_NOW:
                    step()
            except Exception:  # a database hiccup must not kill the worker; the next beat retries
                log.exception("heartbeat step %s failed", step.__name__)
