"""The machine's own pace (optistudio.core.machine.pace) and what a profile says of it."""

from __future__ import annotations

import pytest

from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.tuner import recommend
from optistudio.core.machine.pace import UNSTEADY_SHARE, pace_summary, read_pace, unsteady


def test_a_reading_has_at_least_one_window_of_positive_loop_times() -> None:
    windows = read_pace(0.0)  # asked for nothing, it still reads one window

    assert len(windows) == 1 and windows[0] > 0


def test_the_summary_compares_every_window_with_the_fastest() -> None:
    summary = pace_summary([1.0, 1.1, 2.0, 1.0, 1.3, 1.0, 1.0, 1.0, 1.0, 1.0])

    assert summary == {"spread": 2.0, "slow_share": 0.2, "windows": 10}  # 2.0 and 1.3 are slow
    assert pace_summary([]) == {"spread": 1.0, "slow_share": 0.0, "windows": 0}


@pytest.mark.parametrize(
    ("slow_share", "moved"), [(0.0, False), (UNSTEADY_SHARE, False), (0.2, True)]
)
def test_a_profile_says_so_only_where_the_machine_moved(slow_share: float, moved: bool) -> None:
    pace = {"spread": 2.1, "slow_share": slow_share, "windows": 20}
    profile = LatencyProfile(batch_sizes=[1], mean_ms=[1.0], environment={"machine_pace": pace})

    advice = recommend(profile, p99_budget_ms=10.0, rate=100.0, max_batch_size=1, requests=500)

    assert unsteady(pace) is moved
    assert bool(profile.pace_note()) is moved
    assert ("This machine's own speed moved" in advice.reason) is moved  # the pick says so
    if moved:
        assert "up to 2.1x" in profile.pace_note() and "20%" in profile.pace_note()
    assert LatencyProfile(batch_sizes=[1], mean_ms=[1.0]).pace_note() == ""  # never read
