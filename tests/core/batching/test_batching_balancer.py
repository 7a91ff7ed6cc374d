"""The instance balancer: EWMA scores, demotion of a slow instance and its recovery, affinity."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
from batching_helpers import row

from optistudio.core.backends import SessionOptions, get_backend
from optistudio.core.batching.balancer import Balancer
from optistudio.core.batching.pipeline import Pipeline
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.model.intake import inspect_model


def test_score_is_an_ewma_with_alpha() -> None:
    balancer = Balancer(2, alpha=0.3)
    balancer.observe(0, 1.0)
    balancer.observe(0, 2.0)
    assert balancer.scores[0] == pytest.approx(0.3 * 2.0 + 0.7 * 1.0)


def test_queue_length_weighs_in_when_scores_agree() -> None:
    balancer = Balancer(3)
    for i in range(3):
        balancer.observe(i, 0.001)
    assert balancer.choose([4, 1, 3]) == 1


def test_slow_instance_is_demoted_probed_then_recovers() -> None:
    balancer = Balancer(3, demote_ratio=3.0, recover_ratio=1.5, probe_every=8)
    for i in range(3):
        balancer.observe(i, 0.001)
    for _ in range(10):
        balancer.observe(2, 0.010)
    assert balancer.demoted == [False, False, True]
    picks = [balancer.choose([0, 0, 0]) for _ in range(80)]
    assert picks.count(2) == 10  # probes only: every 8th request
    for _ in range(10):
        balancer.observe(2, 0.001)
    assert balancer.demoted == [False, False, False]


def test_affinity_keys_stick_and_move_off_a_demoted_owner() -> None:
    balancer = Balancer(4, probe_every=10**9)
    owners = {f"user-{k}": balancer.choose([0] * 4, key=f"user-{k}") for k in range(200)}
    assert all(balancer.choose([9, 0, 0, 0], key=k) == o for k, o in owners.items())
    assert len(set(owners.values())) == 4
    for i in range(4):
        balancer.observe(i, 0.001)
    balancer.observe(0, 1.0)
    moved = {k: balancer.choose([0] * 4, key=k) for k in owners}
    assert all(moved[k] != 0 for k in owners)
    assert all(moved[k] == o for k, o in owners.items() if o != 0)


class SlowSwitch:
    """A real session that sleeps `delay` seconds per run while `slow` is set."""

    def __init__(self, model: Path, delay: float) -> None:
        self.model = get_backend("onnxruntime").load(model, SessionOptions(threads=1))
        self.delay, self.slow = delay, threading.Event()

    def __call__(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        if self.slow.is_set():
            time.sleep(self.delay)
        return self.model.run(feeds)


def test_pipeline_sends_less_to_a_slowed_instance_until_it_recovers(tiny_model: Path) -> None:
    fast, slowed = SlowSwitch(tiny_model, 0), SlowSwitch(tiny_model, 0.02)
    slowed.slow.set()
    settings = BatchingSettings(max_batch_size=1, timeout_ms=0, instances=2)
    pipe = Pipeline([fast, slowed], inspect_model(tiny_model).inputs, settings)
    with pipe:
        for _ in range(64):
            pipe.infer(row(1.0), timeout=5)
        assert pipe.balancer.demoted == [False, True]
        assert pipe.balancer.routed[1] <= 64 // 8 + 2
        slowed.slow.clear()
        deadline = time.monotonic() + 30  # a loaded machine's noisy probes take longer
        while pipe.balancer.demoted[1] and time.monotonic() < deadline:
            pipe.infer(row(1.0), timeout=5)  # probes (every 8th request) let its EWMA cool
        # the recovered instance is back; the fast one is not asserted: on a loaded machine one
        # preempted run of this 0.05 ms model can put its own score past 3x the other's, and
        # the balancer then rightly demotes it for a while (seen in CI, 2026-12-05)
        assert not pipe.balancer.demoted[1]
        routed_before = pipe.balancer.routed[1]
        burst = [pipe.submit(row(1.0)) for _ in range(40)]
        [future.result(5) for future in burst]
        assert pipe.balancer.routed[1] - routed_before >= 8  # shares a burst again
