"""How settled a measured tail is: the p99 of a run's two halves."""

from __future__ import annotations

import numpy as np

from optistudio.core.batching.results import p99_halves


def test_the_halves_are_split_in_sending_order_after_the_warm_up() -> None:
    warm_up = [1000.0] * 100  # the first 10 % of 1000: skipped as summarize skips it
    first = [10.0] * 440 + [50.0] * 10  # 2.2 % slow: its p99 is 50 ms
    second = [10.0] * 450  # none slow

    low, high = 10.0, 50.0
    assert p99_halves(warm_up + first + second) == (high, low)
    assert p99_halves(warm_up + second + first) == (low, high)


def test_a_run_too_short_to_split_has_no_halves() -> None:
    assert p99_halves([5.0] * 219) is None  # 197 after the warm-up: halves of 98 < 100
    assert p99_halves([5.0] * 230) == (5.0, 5.0)


def test_unserved_requests_are_left_out() -> None:
    latencies = np.r_[np.full(30, 1.0), np.full(130, 7.0), np.full(10, np.nan), np.full(130, 9.0)]

    assert p99_halves(latencies.tolist()) == (7.0, 9.0)
