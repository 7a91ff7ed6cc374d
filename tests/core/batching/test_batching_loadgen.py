"""The load generator on a real pipeline: open and closed loops, counts and refusals."""

from __future__ import annotations

import weakref
from pathlib import Path

import numpy as np
import pytest
from batching_helpers import row

from optistudio.core.batching.loadgen import _schedule, run_load
from optistudio.core.batching.pipeline import Pipeline
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.errors import InvalidSpec


@pytest.fixture
def pipe(tiny_model: Path):
    with Pipeline.load(tiny_model, BatchingSettings(max_batch_size=8, timeout_ms=1)) as pipeline:
        yield pipeline


def test_open_loop_serves_every_request_with_a_time_split(pipe: Pipeline) -> None:
    run = run_load(pipe, [row(1.0), row(2.0)], process="poisson", rate=500, requests=200, seed=1)

    assert run.result.completed == 200 and run.result.failed == 0
    assert len(run.queue_ms) == 200
    for queue, compute, total in zip(run.queue_ms, run.compute_ms, run.latency_ms, strict=True):
        assert queue >= 0 and compute > 0 and queue + compute == pytest.approx(total)
    assert run.result.p50_ms <= run.result.p90_ms <= run.result.p99_ms


@pytest.mark.timing
def test_poisson_schedule_repeats_with_its_seed(pipe: Pipeline) -> None:
    """Both runs send on the one schedule the seed draws, never before a request is due (a
    loaded machine may send late, so how late is not asserted), and another seed draws
    another schedule."""
    first = run_load(pipe, [row(1.0)], rate=400, requests=40, seed=5)
    again = run_load(pipe, [row(1.0)], rate=400, requests=40, seed=5)

    due_ms = _schedule("poisson", 400, 40, 5) * 1000
    for run in (first, again):
        assert len(run.sent_ms) == 40
        assert all(sent >= due - 1e-3 for sent, due in zip(run.sent_ms, due_ms, strict=True))
    assert np.array_equal(due_ms, _schedule("poisson", 400, 40, 5) * 1000)
    assert not np.array_equal(due_ms, _schedule("poisson", 400, 40, 6) * 1000)


def test_closed_loop_by_count(pipe: Pipeline) -> None:
    run = run_load(pipe, [row(1.0)], process="closed", clients=4, requests=100)

    assert run.result.completed == 100 and run.result.offered_rate is None


def test_duration_bounds_an_open_loop(pipe: Pipeline) -> None:
    run = run_load(pipe, [row(1.0)], process="constant", rate=200, seconds=0.25)

    assert 45 <= run.result.completed <= 52
    assert run.result.offered_rate == 200 and run.result.realised_rate > 0  # reported beside it


class _Watched(Pipeline):
    """A real pipeline that notes, at each submit, how many answered requests are still held."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.futures: list[weakref.ref] = []
        self.held: list[int] = []

    def submit(self, feeds):
        earlier = self.futures[: max(len(self.futures) - 100, 0)]  # 0.1 s ago and more
        # answered and still alive; one not yet answered (a loaded machine's pipeline falls
        # behind) is rightly held by the pipeline's queue
        self.held.append(sum(bool((f := ref()) is not None and f.done()) for ref in earlier))
        future = super().submit(feeds)
        self.futures.append(weakref.ref(future))
        return future


@pytest.mark.timing
def test_an_open_loop_holds_no_answered_request(tiny_model: Path) -> None:
    """Held to the end of a run, every request's future, lock and answer stayed alive, and
    Python's full collections, which walk every live object, stopped the serving threads for
    tens of milliseconds several times a run: the measured tail was the load generator's."""
    settings = BatchingSettings(max_batch_size=8, timeout_ms=1)
    with _Watched.load(tiny_model, settings) as pipeline:
        run = run_load(pipeline, [row(1.0)], process="constant", rate=1000, requests=400)

    assert run.result.completed == 400
    assert max(pipeline.held) <= 8  # the last batch still on its way back, not the run


def test_a_run_needs_a_length() -> None:
    with pytest.raises(InvalidSpec, match="number of requests or a duration"):
        run_load(None, [row(1.0)], rate=10)  # type: ignore[arg-type]


def test_the_send_schedule_is_known_before_the_run() -> None:
    from optistudio.core.batching.loadgen import send_schedule

    due = send_schedule("poisson", 400, seconds=0.1, seed=5)

    assert len(due) > 10 and due.max() <= 0.1 and (np.diff(due) >= 0).all()
    assert np.array_equal(due, _schedule("poisson", 400, len(due), 5))
    assert np.array_equal(send_schedule("poisson", 400, requests=7, seed=5), due[:7])
