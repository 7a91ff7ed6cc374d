"""Which tasks the broker holds: waiting in a queue, or delivered and not yet acknowledged.

Celery's Redis transport keeps each queue (and each of its priority levels) as a Redis list of
JSON messages, and every message delivered to a worker but not acknowledged in the ``unacked``
hash until it is. A task id found in neither is not coming: Redis lost it (killed inside its
fsync window, or restored from an older file) or it was never sent. Other brokers: unknown.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from celery import Celery
from kombu.exceptions import OperationalError

log = logging.getLogger(__name__)

REDIS_TRANSPORTS = frozenset({"redis", "rediss"})
CONNECT_TIMEOUT_S = 2.0
"""A broker that is down must not hold up the heartbeat thread that runs this."""


def task_ids_in_broker(app: Celery) -> set[str] | None:
    """Ids of every task message in the broker; None when it is not Redis or does not answer."""
    with app.connection_for_read(connect_timeout=CONNECT_TIMEOUT_S) as connection:
        if connection.transport.driver_type not in REDIS_TRANSPORTS:
            return None
        try:
            return _scan(connection.default_channel)
        except (OperationalError, *connection.connection_errors) as exc:
            log.warning("could not read the broker's queues (%s); the next beat tries again", exc)
            return None


def _scan(channel: Any) -> set[str]:
    client = channel.client
    ids = set()
    for key in client.scan_iter(_type="list", count=1000):
        ids.update(_task_id(raw) for raw in client.lrange(key, 0, -1))
    for raw in client.hvals(channel.unacked_key):
        ids.add(_task_id(raw, delivered=True))
    ids.discard("")
    return ids


def _task_id(raw: bytes | str, *, delivered: bool = False) -> str:
    """The task id in one stored message ('' when it is not a task message)."""
    try:
        message = json.loads(raw)
        if delivered:  # the unacked hash stores [message, exchange, routing key]
            message = message[0]
        return str(message["headers"]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        return ""
