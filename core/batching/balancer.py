"""Spreading requests over model instances.

Each instance keeps an EWMA of its observed compute latency per row,
    score <- a * latency + (1 - a) * score        (a = 0.3 by default),
and a request goes to the instance with the least expected wait, score * (rows ahead + 1).
An instance without an observation yet scores 0, so each is tried once early.

An instance whose score exceeds `demote_ratio` times the median score of the others is demoted:
it gets only every `probe_every`-th request, enough to keep measuring it. It recovers when its
score falls back under `recover_ratio` times that median (hysteresis, so it does not flap).

Requests with an affinity key go to the instance a consistent-hash ring assigns the key
(`VIRTUAL_NODES` points per instance); a demoted owner hands its keys to the next live instance
on the ring, and gets them back when it recovers.
"""

from __future__ import annotations

import bisect
import hashlib
import statistics
import threading
from collections.abc import Sequence

VIRTUAL_NODES = 64


class Balancer:
    """Thread-safe instance chooser; call `observe` after each batch an instance ran."""

    def __init__(
        self,
        instances: int,
        *,
        alpha: float = 0.3,
        demote_ratio: float = 3.0,
        recover_ratio: float = 1.5,
        probe_every: int = 8,
    ) -> None:
        if instances < 1 or not 0 < alpha <= 1 or not 1 <= recover_ratio <= demote_ratio:
            raise ValueError("need instances >= 1, 0 < alpha <= 1, 1 <= recover <= demote")
        self.alpha, self.demote_ratio, self.recover_ratio = alpha, demote_ratio, recover_ratio
        self.probe_every = probe_every
        self.scores: list[float | None] = [None] * instances
        self.demoted = [False] * instances
        self.routed = [0] * instances
        self._requests = 0
        self._lock = threading.Lock()
        self._ring = _hash_ring(instances)

    def observe(self, instance: int, latency_per_row_s: float) -> None:
        """Fold one batch's compute latency (seconds per row) into the instance's score."""
        with self._lock:
            old = self.scores[instance]
            new = (
                latency_per_row_s
                if old is None
                else (self.alpha * latency_per_row_s + (1 - self.alpha) * old)
            )
            self.scores[instance] = new
            self._update_demotion(instance)

    def choose(self, rows_ahead: Sequence[int], key: str | None = None) -> int:
        """The instance for the next request, given the rows queued or running on each."""
        with self._lock:
            self._requests += 1
            choice = self._choose(rows_ahead, key)
            self.routed[choice] += 1
            return choice

    def _choose(self, rows_ahead: Sequence[int], key: str | None) -> int:
        live = [i for i, down in enumerate(self.demoted) if not down] or list(
            range(len(rows_ahead))
        )
        probe = self._probe_target()
        if probe is not None:
            return probe
        if key is not None:
            return self._owner(key, set(live))
        return min(live, key=lambda i: ((self.scores[i] or 0.0) * (rows_ahead[i] + 1), i))

    def _probe_target(self) -> int | None:
        demoted = [i for i, down in enumerate(self.demoted) if down]
        if not demoted or len(demoted) == len(self.demoted):
            return None
        if self._requests % self.probe_every:
            return None
        return demoted[(self._requests // self.probe_every) % len(demoted)]

    def _owner(self, key: str, live: set[int]) -> int:
        points, owners = self._ring
        start = bisect.bisect(points, _hash(key)) % len(points)
        for step in range(len(points)):
            owner = owners[(start + step) % len(points)]
            if owner in live:
                return owner
        return owners[start]

    def _update_demotion(self, instance: int) -> None:
        others = [s for i, s in enumerate(self.scores) if i != instance and s is not None]
        score = self.scores[instance]
        if not others or score is None:
            return
        reference = statistics.median(others)
        if self.demoted[instance]:
            self.demoted[instance] = score > self.recover_ratio * reference
        else:
            self.demoted[instance] = score > self.demote_ratio * reference
        self._refresh_others(instance)

    def _refresh_others(self, changed: int) -> None:
        """A score change moves the median the others are judged by; re-judge demoted ones."""
        for other, down in enumerate(self.demoted):
            if other == changed or not down:
                continue
            rest = [s for i, s in enumerate(self.scores) if i != other and s is not None]
            score = self.scores[other]
            if rest and score is not None:
                self.demoted[other] = score > self.recover_ratio * statistics.median(rest)


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def _hash_ring(instances: int) -> tuple[list[int], list[int]]:
    points = sorted(
        (_hash(f"instance-{i}-{v}"), i) for i in range(instances) for v in range(VIRTUAL_NODES)
    )
    return [point for point, _ in points], [owner for _, owner in points]
