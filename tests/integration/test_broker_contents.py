"""optistudio.workers.broker_contents against a real Redis: task ids waiting in a queue and delivered but
not yet acknowledged are both found; a message taken and acknowledged is not."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from faultstack import wait_until

from optistudio.cli.launcher import free_port, redis_command, redis_ready
from optistudio.services.settings import Settings
from optistudio.workers.app import create_app
from optistudio.workers.broker_contents import task_ids_in_broker

pytestmark = [pytest.mark.integration]


@pytest.fixture
def app(tmp_path: Path) -> Iterator[object]:
    port = free_port()
    redis = subprocess.Popen(redis_command(port, tmp_path / "redis"), stdout=subprocess.DEVNULL)
    app = create_app(Settings(data_dir=tmp_path, broker_url=f"redis://127.0.0.1:{port}/0"))
    try:
        wait_until(lambda: redis_ready(port), "redis answering PING", 30)
        yield app
    finally:
        app.close()
        redis.kill()
        redis.wait(timeout=30)


def test_waiting_and_unacknowledged_tasks_are_found_acknowledged_ones_are_not(app) -> None:
    sent = [app.send_task("optistudio.benchmark", args=[n], queue="cpu").id for n in (1, 2, 3)]
    with app.connection_for_read() as connection:
        queue = connection.SimpleQueue("cpu", no_ack=False)
        delivered = queue.get(timeout=5)  # the oldest; now in Redis's 'unacked' hash
        acknowledged = queue.get(timeout=5)
        acknowledged.ack()

        found = task_ids_in_broker(app)

        delivered.ack()
        queue.close()

    assert delivered.headers["id"] == sent[0] and acknowledged.headers["id"] == sent[1]
    assert found == {sent[0], sent[2]}
