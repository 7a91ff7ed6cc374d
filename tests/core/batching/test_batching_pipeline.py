"""The batching runtime: batch formation, routing, isolation, backpressure, shutdown."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from batching_helpers import Recorder, build_double_model, row

from optistudio.core.backends import SessionOptions
from optistudio.core.batching.applicability import StackAxes
from optistudio.core.batching.latency import QUICK_PROBE_SCALE
from optistudio.core.batching.pipeline import Pipeline
from optistudio.core.batching.settings import BatchingSettings, serving_threads, settings_from
from optistudio.core.errors import (
    Cancelled,
    InferenceFailed,
    InvalidSpec,
    PipelineClosed,
    QueueFull,
)
from optistudio.core.model.info import TensorSpec
from optistudio.core.model.intake import inspect_model

WAIT = 5  # seconds a future may take; the held tests use a 9 s timeout, so a missed trigger fails


@pytest.fixture
def double(tmp_path: Path) -> Path:
    return build_double_model(tmp_path / "double.onnx")


def pipeline(model: Path, recorder: Recorder, **settings: object) -> Pipeline:
    return Pipeline([recorder], inspect_model(model).inputs, BatchingSettings(**settings))


def submit_held(pipe: Pipeline, recorder: Recorder, values: list[float]) -> list:
    """Hold the instance on a first, full batch, queue `values` behind it, then let it go."""
    recorder.gate.clear()
    first = pipe.submit(row(-1.0, rows=pipe.settings.max_batch_size))
    assert recorder.entered.wait(WAIT)
    futures = [pipe.submit(row(v)) for v in values]
    recorder.gate.set()
    return [first, *futures]


def test_size_trigger_sends_full_batches_without_waiting(double: Path) -> None:
    recorder = Recorder(double)
    with pipeline(double, recorder, max_batch_size=4, timeout_ms=9_000) as pipe:
        futures = submit_held(pipe, recorder, [float(i) for i in range(8)])
        [future.result(WAIT) for future in futures[1:]]
    assert recorder.sizes == [4, 4, 4]


@pytest.mark.timing
def test_timeout_trigger_sends_a_partial_batch_after_the_wait(double: Path) -> None:
    """The batch leaves 50 ms after its oldest request with every request that came within
    them: all three, unless a stall of the sending thread (a loaded machine) spread them wider."""
    recorder = Recorder(double)
    with pipeline(double, recorder, max_batch_size=64, timeout_ms=50) as pipe:
        sending = time.perf_counter()
        futures = [pipe.submit(row(v)) for v in (1.0, 2.0, 3.0)]
        sent_within_ms = (time.perf_counter() - sending) * 1000
        responses = [f.result(WAIT) for f in futures]
    assert recorder.sizes == [3] or (sent_within_ms >= 45 and sum(recorder.sizes) == 3)
    assert responses[0].queue_ms >= 45 and responses[0].batch_size == recorder.sizes[0]


def test_eager_threshold_sends_before_the_timeout(double: Path) -> None:
    recorder = Recorder(double)
    with pipeline(double, recorder, max_batch_size=64, timeout_ms=9_000, eager_threshold=3) as p:
        [f.result(WAIT) for f in [p.submit(row(v)) for v in (1.0, 2.0, 3.0)]]
    assert recorder.sizes == [3]


def test_preferred_sizes_cut_the_queue(double: Path) -> None:
    recorder = Recorder(double)
    settings = {"max_batch_size": 8, "timeout_ms": 9_000, "preferred_batch_sizes": [2]}
    with pipeline(double, recorder, **settings) as pipe:
        futures = submit_held(pipe, recorder, [1.0, 2.0, 3.0, 4.0])
        [future.result(WAIT) for future in futures[1:]]
    assert recorder.sizes == [8, 2, 2]


def test_rows_waiting_are_counted_as_requests_come_and_go(double: Path) -> None:
    """The size trigger counts rows, not requests, and forgets the rows a batch took: requests
    of 2, 1, 2, 1 and 2 rows (max 4) go as 2+1 and 2+1, the last 2 rows wait (the timeout is
    9 s) until 2 more make 4."""
    recorder = Recorder(double)
    with pipeline(double, recorder, max_batch_size=4, timeout_ms=9_000) as pipe:
        futures = [pipe.submit(row(float(i), rows=1 + (i % 2 == 0))) for i in range(5)]
        [future.result(WAIT) for future in futures[:4]]
        assert not futures[4].done()
        last = pipe.submit(row(9.0, rows=2))
        [future.result(WAIT) for future in (futures[4], last)]
    assert recorder.sizes == [3, 3, 4]


def test_shapes_are_batched_only_with_their_own(double: Path) -> None:
    recorder = Recorder(double)
    with pipeline(double, recorder, max_batch_size=8, timeout_ms=20) as pipe:
        recorder.gate.clear()
        first = pipe.submit(row(0.0, length=3))
        assert recorder.entered.wait(WAIT)
        futures = [pipe.submit(row(float(i), length=3 + 2 * (i % 2))) for i in range(6)]
        recorder.gate.set()
        responses = [f.result(WAIT) for f in [first, *futures]]
    assert sorted(recorder.shapes[1:]) == [(3, 3), (3, 5)]
    for i, response in enumerate(responses[1:]):
        np.testing.assert_array_equal(response.outputs[0], 2 * row(float(i), 3 + 2 * (i % 2))["x"])


def test_results_go_back_to_their_callers(tiny_model: Path) -> None:
    single = Recorder(tiny_model)
    rng = np.random.default_rng(0)
    requests = [{"x": rng.standard_normal((n, 16)).astype(np.float32)} for n in (1, 3, 2, 1, 4)]
    expected = [single.model.run(feeds)[0] for feeds in requests]
    # 11 rows in all: the size trigger sends them as one batch however slowly they are sent
    with pipeline(tiny_model, Recorder(tiny_model), max_batch_size=11, timeout_ms=9_000) as pipe:
        responses = [f.result(WAIT) for f in [pipe.submit(feeds) for feeds in requests]]
    for response, want in zip(responses, expected, strict=True):
        np.testing.assert_allclose(response.outputs[0], want, rtol=1e-5, atol=1e-6)
    assert {response.batch_size for response in responses} == {11}


def test_a_failing_batch_fails_only_its_own_requests(double: Path) -> None:
    recorder = Recorder(double)
    recorder.poison = 99.0
    with pipeline(double, recorder, max_batch_size=2, timeout_ms=9_000) as pipe:
        futures = submit_held(pipe, recorder, [1.0, 99.0, 3.0, 4.0])
        with pytest.raises(InferenceFailed, match="poisoned row"):
            futures[2].result(WAIT)
        assert futures[1].exception(WAIT) is not None
        assert [f.result(WAIT).outputs[0][0, 0] for f in futures[3:]] == [6.0, 8.0]
    assert pipe.stats.failed_batches == 1


@pytest.mark.parametrize(
    ("feeds", "message"),
    [
        ({"x": np.ones((1, 16), dtype=np.float64)}, "dtype float64; the model takes float32"),
        ({"x": np.ones((1, 4), dtype=np.float32)}, "size 4 at dim 1"),
        ({"x": np.ones(16, dtype=np.float32)}, "takes 2 dims"),
        ({"y": np.ones((1, 16), dtype=np.float32)}, "do not match"),
        ({"x": np.ones((9, 16), dtype=np.float32)}, "1..8"),
    ],
    ids=["dtype", "shape", "rank", "name", "too-many-rows"],
)
def test_a_malformed_request_is_refused_alone(tiny_model: Path, feeds: dict, message: str) -> None:
    recorder = Recorder(tiny_model)
    # the eager threshold sends the two good requests together however slowly they are sent
    settings = {"max_batch_size": 8, "timeout_ms": 9_000, "eager_threshold": 2}
    with pipeline(tiny_model, recorder, **settings) as pipe:
        mate = pipe.submit(row(1.0))
        for _ in range(2):  # checked layouts are remembered; a refused one stays refused
            with pytest.raises(InvalidSpec, match=message):
                pipe.submit(feeds)
        other = pipe.submit(row(2.0))
        assert mate.result(WAIT).batch_size == 2 and other.result(WAIT).batch_size == 2


def test_requests_with_different_shared_values_never_share_a_batch() -> None:
    """A shared input (no batch axis, e.g. a sample rate) is part of what a batch shares:
    requests laid out alike but carrying another value go in their own batch, also once the
    layout's check is remembered."""
    inputs = [
        TensorSpec(name="x", dtype="float32", shape=["batch", 4]),
        TensorSpec(name="scale", dtype="float32", shape=[1]),
    ]
    sizes: list[int] = []

    def scaled(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        sizes.append(len(feeds["x"]))
        return [feeds["x"] * feeds["scale"]]

    # no batch leaves before the close drains the queue, however slowly the five are sent
    settings = BatchingSettings(max_batch_size=8, timeout_ms=9_000)
    axes = StackAxes({"x": 0, "scale": None}, (0,))
    with Pipeline([scaled], inputs, settings, axes=axes) as pipe:
        sent = [
            (
                value,
                pipe.submit(
                    {"x": np.ones((1, 4), np.float32), "scale": np.full(1, value, np.float32)}
                ),
            )
            for value in (2.0, 3.0, 2.0, 3.0, 2.0)
        ]
    for value, future in sent:
        np.testing.assert_array_equal(future.result(WAIT).outputs[0], np.full((1, 4), value))
    assert sorted(sizes) == [2, 3]


def test_full_queue_refuses_new_requests_until_it_drains(double: Path) -> None:
    recorder = Recorder(double)
    with pipeline(double, recorder, max_batch_size=1, timeout_ms=0, max_queue=2) as pipe:
        recorder.gate.clear()
        running = pipe.submit(row(0.0))
        assert recorder.entered.wait(WAIT)
        queued = [pipe.submit(row(1.0)), pipe.submit(row(2.0))]
        with pytest.raises(QueueFull, match="2 requests waiting"):
            pipe.submit(row(3.0))
        recorder.gate.set()
        [f.result(WAIT) for f in [running, *queued]]
        assert pipe.submit(row(4.0)).result(WAIT).outputs[0][0, 0] == 8.0


def test_close_drains_the_queue(double: Path) -> None:
    recorder = Recorder(double)
    pipe = pipeline(double, recorder, max_batch_size=2, timeout_ms=9_000)
    futures = submit_held(pipe, recorder, [1.0, 2.0, 3.0])
    pipe.close(drain=True, timeout=WAIT)
    assert [f.result(0).outputs[0][0, 0] for f in futures[1:]] == [2.0, 4.0, 6.0]
    with pytest.raises(PipelineClosed):
        pipe.submit(row(1.0))


def test_close_without_drain_cancels_what_waits(double: Path) -> None:
    recorder = Recorder(double)
    pipe = pipeline(double, recorder, max_batch_size=1, timeout_ms=0)
    recorder.gate.clear()
    running = pipe.submit(row(1.0))
    assert recorder.entered.wait(WAIT)
    queued = [pipe.submit(row(2.0)), pipe.submit(row(3.0))]
    closer = threading.Thread(target=pipe.close, kwargs={"drain": False, "timeout": WAIT})
    closer.start()
    for future in queued:
        assert isinstance(future.exception(WAIT), Cancelled)
    recorder.gate.set()
    closer.join(WAIT)
    assert running.result(0).outputs[0][0, 0] == 2.0


def test_asyncio_api_serves_concurrent_requests(tiny_model: Path) -> None:
    async def main(pipe: Pipeline) -> list:
        return await asyncio.gather(*(pipe.infer_async(row(float(i))) for i in range(6)))

    with pipeline(tiny_model, Recorder(tiny_model), max_batch_size=8, timeout_ms=20) as pipe:
        responses = asyncio.run(main(pipe))
    assert len(responses) == 6 and all(r.outputs[0].shape == (1, 8) for r in responses)


def test_load_refuses_a_model_without_batch_dim(make_model) -> None:
    with pytest.raises(InvalidSpec, match="does not apply.*fixed first dimension of 1"):
        Pipeline.load(make_model(batch=1))


def test_load_runs_instances_on_the_backend(tiny_model: Path) -> None:
    settings = BatchingSettings(max_batch_size=4, timeout_ms=1, instances=2)
    with Pipeline.load(tiny_model, settings) as pipe:
        responses = [pipe.infer(row(1.0), timeout=WAIT) for _ in range(4)]
    assert all(r.outputs[0].shape == (1, 8) for r in responses)


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"max_batch_size": 0}, "max_batch_size"),
        ({"timeout_ms": -1}, "timeout_ms"),
        ({"max_batch_size": 4, "preferred_batch_sizes": [8]}, "preferred batch sizes"),
        ({"instances": 0}, "instances"),
        ({"max_queue": 0}, "max_queue"),
        ({"batch": 4}, "batch"),
    ],
    ids=["batch", "timeout", "preferred", "instances", "queue", "misspelt"],
)
def test_settings_out_of_range_are_named(values: dict, field: str) -> None:
    with pytest.raises(InvalidSpec, match=field):
        settings_from(values)


def test_served_and_profiled_models_do_not_spin_unless_asked(
    double: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from optistudio.core.backends import SessionOptions, get_backend
    from optistudio.core.batching import latency_profile as profile_module
    from optistudio.core.batching import pipeline as pipeline_module

    loaded: list[SessionOptions] = []

    class Recording:
        def __init__(self, name: str) -> None:
            self.backend = get_backend(name)

        def load(self, path: Path, options: SessionOptions):  # type: ignore[no-untyped-def]
            loaded.append(options)
            return self.backend.load(path, options)

    monkeypatch.setattr(pipeline_module, "get_backend", Recording)
    monkeypatch.setattr(profile_module, "get_backend", Recording)

    with Pipeline.load(double, BatchingSettings(max_batch_size=2)) as pipe:
        assert pipe.infer(row(1.0)).outputs[0][0][0] == 2.0
    with Pipeline.load(double, BatchingSettings(), options=SessionOptions(spin_wait=True)):
        pass
    profile = profile_module.measure_latency_profile(
        double, max_batch_size=2, min_runs=2, min_seconds=0.01, probe_time_scale=QUICK_PROBE_SCALE
    )

    # then each instance count past one served: its sessions with their share of the threads
    served = [row.instances for row in profile.instance_latency]  # the counts it measured
    assert [options.spin_wait for options in loaded] == [False, True, False] + [False] * sum(served)
    assert [options.threads for options in loaded] == [serving_threads()] * 3 + [
        serving_threads(count) for count in served for _ in range(count)
    ]


@pytest.mark.parametrize(
    ("cores", "instances", "threads"),
    [(16, 1, 15), (16, 2, 7), (2, 1, 1), (1, 1, 1), (4, 8, 1)],
    ids=["16-cores", "16-cores-2-instances", "2-cores", "1-core", "more-instances-than-cores"],
)
def test_serving_leaves_a_core_to_the_serving_threads(
    cores: int, instances: int, threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from optistudio.core.batching import settings as settings_module

    monkeypatch.setattr(settings_module, "available_cores", lambda: list(range(cores)))

    assert serving_threads(instances) == threads
    given = SessionOptions(threads=3)
    assert settings_module.with_serving_threads(given, instances) is given
