"""The profile's hand-back time per batch under load: measured through the real Pipeline,
added by the simulator to every batch unless the caller says otherwise, absent (None) in
profiles stored before it was measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from optistudio.core.batching.latency import QUICK_PROBE_SCALE, LatencyProfile
from optistudio.core.batching.latency_profile import measure_latency_profile
from optistudio.core.batching.results import BatchRecord
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.simulate import simulate
from optistudio.core.batching.trace import handoff_gaps_ms

FULL_BATCHES = BatchingSettings(max_batch_size=8, timeout_ms=0)
STEP = LatencyProfile(batch_sizes=[1, 8], mean_ms=[1.0, 3.0])


def _closed(profile: LatencyProfile, **kwargs: float) -> float:
    return simulate(
        profile, FULL_BATCHES, process="closed", clients=16, requests=8000, **kwargs
    ).throughput


@pytest.mark.timing
def test_a_profile_carries_the_hand_back_time_of_the_real_pipeline(tiny_model: Path) -> None:
    profile = measure_latency_profile(
        tiny_model, max_batch_size=4, min_runs=5, min_seconds=0, probe_time_scale=QUICK_PROBE_SCALE
    )

    # measured, or absent with the reason (a closed loop with no two batches back to back)
    if profile.handoff_ms is None:
        assert "could not be measured here" in profile.unmeasured["handoff_ms"]
    else:
        assert profile.handoff_ms >= 0 and "handoff_ms" not in profile.unmeasured
    stored = LatencyProfile.model_validate_json(profile.model_dump_json())
    assert stored.handoff_ms == profile.handoff_ms


def test_simulate_adds_the_profiles_hand_back_to_every_batch_by_default() -> None:
    slow_handback = STEP.model_copy(update={"handoff_ms": 3.0})

    assert _closed(STEP) == pytest.approx(8 / 0.003, rel=0.01)  # a batch of 8 every 3 ms
    assert _closed(slow_handback) == pytest.approx(8 / 0.006, rel=0.01)  # ... every 3 + 3 ms
    assert _closed(slow_handback, overhead_ms=0.0) == pytest.approx(_closed(STEP))  # caller wins
    assert _closed(STEP, overhead_ms=3.0) == pytest.approx(_closed(slow_handback))


def test_the_ceiling_with_hand_back_is_the_runtimes() -> None:
    slow_handback = STEP.model_copy(update={"handoff_ms": 3.0})

    assert slow_handback.ceiling(8) == STEP.ceiling(8) == (pytest.approx(8 / 0.003), 8)
    assert slow_handback.ceiling(8, with_handoff=True) == (pytest.approx(8 / 0.006), 8)
    assert STEP.ceiling(8, with_handoff=True) == STEP.ceiling(8)


def test_a_profile_stored_before_the_hand_back_was_measured_still_loads() -> None:
    stored = {
        "batch_sizes": [1, 8],
        "mean_ms": [1.0, 3.0],
        "p50_ms": [1.0, 3.0],
        "p99_ms": [1.2, 3.5],
        "runs": [[1, 1.0], [8, 3.0]],
        "backend": "onnxruntime",
        "environment": {},
    }

    profile = LatencyProfile.model_validate_json(json.dumps(stored))

    assert profile.handoff_ms is None
    assert _closed(profile) == pytest.approx(_closed(profile, overhead_ms=0.0))


def test_only_batches_that_waited_count_as_hand_back() -> None:
    batches = [
        BatchRecord(0, 8, 8, 0.000, 0.000, 0.000, 0.010),
        BatchRecord(0, 8, 8, 0.005, 0.011, 0.011, 0.020),  # waited: 1 ms hand-back
        BatchRecord(0, 1, 1, 0.030, 0.030, 0.030, 0.031),  # came after an idle gap: not counted
        BatchRecord(1, 1, 1, 0.030, 0.032, 0.032, 0.033),  # another instance: not counted
    ]

    assert handoff_gaps_ms(batches) == [pytest.approx(1.0)]


def test_a_cost_that_could_not_be_measured_is_said_in_the_recommendation() -> None:
    from optistudio.core.batching.handoff import REQUEST_UNMEASURED
    from optistudio.core.batching.tuner import recommend

    why = REQUEST_UNMEASURED.format(rate=160_000)
    unmeasured = STEP.model_copy(update={"unmeasured": {"request_ms": why}})

    advice = recommend(unmeasured, p99_budget_ms=50.0, rate=100.0, max_batch_size=8)
    plain = recommend(STEP, p99_budget_ms=50.0, rate=100.0, max_batch_size=8)
    assert advice.reason == f"{plain.reason} Serving machinery per request: {why}."
    assert LatencyProfile.model_validate_json(unmeasured.model_dump_json()) == unmeasured
