"""The real pipeline and the simulator form the same batches; a recorded run replays batch by
batch."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from batching_helpers import Recorder, build_double_model, row

from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.loadgen import run_load
from optistudio.core.batching.pipeline import Pipeline
from optistudio.core.batching.results import BatchRecord
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.simulate import simulate
from optistudio.core.batching.trace import compare, handoff_ms, replay
from optistudio.core.model.intake import inspect_model

WAIT = 5
SLOW = LatencyProfile(batch_sizes=[1], mean_ms=[10_000.0])  # every batch outlasts the scenario


@pytest.mark.parametrize(
    ("settings", "queued", "batches"),
    [
        ({"max_batch_size": 4}, 10, [1, 4, 4, 2]),
        ({"max_batch_size": 8, "preferred_batch_sizes": [3]}, 10, [1, 3, 3, 3, 1]),
        ({"max_batch_size": 8, "eager_threshold": 6}, 13, [1, 8, 5]),
    ],
    ids=["max-4", "preferred-3", "eager-6"],
)
def test_pipeline_and_simulator_form_the_same_batches_while_the_runner_is_busy(
    tmp_path: Path, settings: dict, queued: int, batches: list[int]
) -> None:
    """One request leaves alone at its timeout; `queued` more arrive while it runs and are
    overdue when it ends: both sides cut them by the same rule, not frozen early."""
    chosen = BatchingSettings(timeout_ms=20, **settings)
    model = build_double_model(tmp_path / "double.onnx")
    recorder = Recorder(model)
    with Pipeline([recorder], inspect_model(model).inputs, chosen) as pipe:
        recorder.gate.clear()
        first = pipe.submit(row(0.0))
        assert recorder.entered.wait(WAIT)
        futures = [pipe.submit(row(float(i))) for i in range(queued)]
        time.sleep(3 * chosen.timeout_s)  # let every queued request pass its timeout
        recorder.gate.set()
        [future.result(WAIT) for future in [first, *futures]]

    arrivals = [0.0] + [2 * chosen.timeout_s] * queued  # after the first left, before it ends
    predicted = simulate(SLOW, chosen, arrivals=arrivals, warmup_share=0)

    assert recorder.sizes == batches
    assert predicted.batch_histogram == Counter(batches)


def test_a_load_run_records_every_batch_on_its_clock(tiny_model: Path) -> None:
    with Pipeline.load(tiny_model, BatchingSettings(max_batch_size=8, timeout_ms=1)) as pipe:
        run = run_load(pipe, [row(1.0)], process="poisson", rate=400, requests=120, seed=2)

    assert sum(batch.requests for batch in run.batches) == 120
    assert sum(batch.rows for batch in run.batches) == 120
    for batch in run.batches:
        assert 0 <= batch.oldest <= batch.cut <= batch.run_start <= batch.run_end
    cuts = [batch.cut for batch in run.batches]
    assert cuts == sorted(cuts)


def test_replay_uses_the_recorded_run_times_in_order() -> None:
    settings = BatchingSettings(max_batch_size=4, timeout_ms=1)
    sent = [0.0, 0.0002, 0.0004, 0.0006, 0.0008, 0.0200]
    recorded = [_record(4, 0.0006, 0.0106), _record(1, 0.0106, 0.0156), _record(1, 0.021, 0.03)]

    replayed = replay(settings, sent, recorded, warmup_share=0)

    assert [batch.rows for batch in replayed.batches] == [4, 1, 1]
    assert replayed.batches[0].run_end == pytest.approx(0.0106)
    assert replayed.batches[1].cut == pytest.approx(0.0106)  # it waited behind the first
    assert replayed.batches[2].cut == pytest.approx(0.021)  # the last left at its timeout
    assert replayed.batches[2].run_end == pytest.approx(0.021 + 0.009)
    assert replayed.result.completed == 6


def test_compare_finds_the_first_batch_that_differs_and_the_slowdown() -> None:
    profile = LatencyProfile(batch_sizes=[1, 4], mean_ms=[1.0, 4.0])
    real = [_record(4, 0.0, 0.008), _record(1, 0.01, 0.012), _record(2, 0.02, 0.021)]
    simulated = [_record(4, 0.0, 0.004), _record(2, 0.005, 0.0065)]

    report = compare(real, simulated, profile)

    assert report.first_difference == 1
    assert report.real_sizes == {4: 1, 1: 1, 2: 1} and report.simulated_sizes == {4: 1, 2: 1}
    assert report.slowdown[4] == pytest.approx(2.0)  # 8 ms measured against 4 in the profile
    assert report.slowdown[1] == pytest.approx(2.0)


def test_replay_adds_the_runs_hand_back_time_to_each_batch() -> None:
    settings = BatchingSettings(max_batch_size=1, timeout_ms=0)
    sent = [0.0, 0.001, 0.002]  # all three wait behind the first
    recorded = [
        BatchRecord(0, 1, 1, 0.0, 0.0, 0.0, 0.010),
        BatchRecord(0, 1, 1, 0.001, 0.012, 0.012, 0.022),  # cut 2 ms after the run before ended
        BatchRecord(0, 1, 1, 0.002, 0.024, 0.024, 0.034),
    ]

    assert handoff_ms(recorded) == pytest.approx(2.0)
    replayed = replay(settings, sent, recorded, warmup_share=0)

    assert [batch.cut for batch in replayed.batches] == pytest.approx([0.0, 0.012, 0.024])
    assert replay(settings, sent, recorded, overhead_s=0).batches[1].cut == pytest.approx(0.010)


def _record(rows: int, cut: float, end: float) -> BatchRecord:
    return BatchRecord(0, rows, rows, cut, cut, cut, end)
