"""A pool process forked while the heartbeat thread writes to SQLite can still write.

A process forked while another of its threads holds a SQLite write transaction inherits
SQLite's in-process lock table in that state, and its own connections find the database locked
forever. The heartbeat thread holds ``optistudio.workers.inventory.NO_FORK_NOW`` while it uses the
database, and every fork waits for it.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from optistudio.db.queries import record_worker
from optistudio.db.session import make_session_factory, transaction
from optistudio.services.migrate import upgrade


def child_can_write(url: str) -> int:
    try:
        with transaction(make_session_factory(url), retry_s=3.0) as s:
            record_worker(s, hostname="child", queues=["cpu"], inventory={})
    except Exception:
        return 1
    return 0


def test_a_fork_waits_until_the_heartbeat_thread_has_committed(tmp_path: Path) -> None:
    from optistudio.workers.inventory import NO_FORK_NOW

    url = f"sqlite:///{tmp_path / 'optistudio.db'}"
    upgrade(url, lock_dir=tmp_path)
    factory = make_session_factory(url)
    writing = threading.Event()

    def heartbeat_step() -> None:
        with NO_FORK_NOW, transaction(factory) as s:
            record_worker(s, hostname="main", queues=["cpu"], inventory={})
            writing.set()
            time.sleep(0.5)  # still inside the write transaction when the fork is asked for

    thread = threading.Thread(target=heartbeat_step)
    thread.start()
    writing.wait()
    pid = os.fork()
    if pid == 0:
        os._exit(child_can_write(url))
    _, status = os.waitpid(pid, 0)
    thread.join()

    assert os.waitstatus_to_exitcode(status) == 0
