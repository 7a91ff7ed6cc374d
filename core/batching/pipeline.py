"""A serving pipeline: requests queue per model instance and leave in dynamic batches.

Batch rule, per instance and per shape bucket (requests whose non-batch dims and dtypes agree):
a batch leaves as soon as the instance is free and either
  - the bucket holds at least `settings.dispatch_threshold()` rows (max batch size, the eager
    threshold or the smallest preferred size, whichever is least), or
  - its oldest request has waited `timeout_ms`.
It takes `settings.cut_size(rows)` rows: the largest preferred size that fits, else everything
up to max_batch_size. Requests are concatenated along dim 0 (or each input's batch axis, see
`optistudio.core.batching.applicability.stack_axes`), run once, and the outputs are split back
by row offsets. A failed run fails only the requests of that batch. Shape and dtype are
checked at `submit`, so a malformed request is refused alone and never joins a batch.
Instances are chosen by `optistudio.core.batching.balancer.Balancer`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from optistudio.core.backends import LoadedModel, SessionOptions, get_backend
from optistudio.core.batching.applicability import StackAxes, one_row_axes, stack_axes
from optistudio.core.batching.balancer import Balancer
from optistudio.core.batching.fixed_batch import fixed_at_one
from optistudio.core.batching.results import BatchRecord
from optistudio.core.batching.settings import (
    BatchingSettings,
    serving_options,
    with_serving_threads,
)
from optistudio.core.errors import (
    Cancelled,
    InferenceFailed,
    InvalidSpec,
    OptistudioError,
    PipelineClosed,
    QueueFull,
    first_line,
)
from optistudio.core.model.info import TensorSpec
from optistudio.core.model.intake import inspect_model

log = logging.getLogger(__name__)

Runner = Callable[[dict[str, np.ndarray]], list[np.ndarray]]
"""Runs one batch: feeds by input name to outputs in model order (LoadedModel.run)."""

Signature = tuple[tuple[Any, ...], ...]
"""Per input: name, dtype, the dims past the batch axis (and a shared input's bytes)."""
CHECKED_LAYOUTS = 64
"""Request layouts (names, dtypes, shapes) whose check a pipeline remembers."""


@dataclass(frozen=True)
class Response:
    """One request's outputs and where its time went."""

    outputs: list[np.ndarray]
    queue_ms: float
    compute_ms: float
    batch_size: int
    instance: int
    run_ms: float = 0.0
    """The runner call's own part of `compute_ms` (without stacking and the outputs' check)."""


@dataclass
class _Request:
    feeds: dict[str, np.ndarray]
    rows: int
    signature: Signature
    future: Future[Response]
    arrived: float = field(default_factory=time.perf_counter)


@dataclass
class PipelineStats:
    """Counters since start: batches run, rows in them, requests per instance."""

    batches: int = 0
    rows: int = 0
    failed_batches: int = 0
    batch_sizes: dict[int, int] = field(default_factory=dict)

    @property
    def mean_batch_size(self) -> float:
        return self.rows / self.batches if self.batches else 0.0


class _Bucket:
    """The queued requests of one signature, with their rows counted as they come and go: a
    batching decision must not walk a queue that overload made thousands long (it did, and
    the batcher slowed as its queue grew until it served half its ceiling)."""

    def __init__(self) -> None:
        self.queue: deque[_Request] = deque()
        self.rows = 0


class _Instance:
    """One runner with its own queue, drained by one thread."""

    def __init__(self, index: int, runner: Runner) -> None:
        self.index, self.runner = index, runner
        self.buckets: dict[Signature, _Bucket] = {}
        self.queued_rows = 0
        self.running_rows = 0
        self.condition = threading.Condition()

    @property
    def rows_ahead(self) -> int:
        return self.queued_rows + self.running_rows


class Pipeline:
    """Dynamic batching over one or more runners of the same model; use as a context manager."""

    def __init__(
        self,
        runners: Sequence[Runner],
        inputs: list[TensorSpec],
        settings: BatchingSettings | None = None,
        *,
        balancer: Balancer | None = None,
        on_close: Callable[[], None] | None = None,
        axes: StackAxes | None = None,
    ) -> None:
        """`axes`: where requests stack (default: dim 0 of every input and output)."""
        self.settings = settings or BatchingSettings()
        if len(runners) != self.settings.instances:
            raise ValueError(f"{len(runners)} runners for {self.settings.instances} instances")
        self.inputs = inputs
        self.axes = axes or StackAxes({spec.name: 0 for spec in inputs}, ())
        self.balancer = balancer or Balancer(len(runners))
        self.stats = PipelineStats()
        self._instances = [_Instance(i, runner) for i, runner in enumerate(runners)]
        self._waiting = 0
        self._lock = threading.Lock()
        self._checked: dict[tuple[Any, ...], tuple[int, Signature]] = {}
        self._closing = False
        self._on_close = on_close
        self._trace: list[BatchRecord] | None = None
        self._threads = [
            threading.Thread(target=self._serve, args=(inst,), name=f"batcher-{inst.index}")
            for inst in self._instances
        ]
        for thread in self._threads:
            thread.daemon = True
            thread.start()

    @classmethod
    def load(
        cls,
        model_path: Path,
        settings: BatchingSettings | None = None,
        *,
        backend: str = "onnxruntime",
        options: SessionOptions | None = None,
        batch_axes: dict[str, int | None] | None = None,
    ) -> Pipeline:
        """Load `settings.instances` sessions of a model on a backend behind one pipeline,
        stacking requests on each input's batch axis (`batch_axes` wins over the inferred).

        Raises InvalidSpec when requests cannot stack (`stack_axes`); a model whose batch is
        fixed at 1 is served as it is at max batch 1. Without options, the
        runtime's idle threads do not spin (`serving_options`); without explicit threads, the
        CPU cores but one are shared out between instances (`serving_threads`).
        """
        settings = settings or BatchingSettings()
        info = inspect_model(model_path)
        if settings.max_batch_size == 1 and fixed_at_one(info, batch_axes):
            axes = one_row_axes(info)  # a batch fixed at 1 served as it is, one row a batch
        else:
            axes = stack_axes(info, batch_axes)
        options = _instance_options(options or serving_options(), settings)
        runtime = get_backend(backend)
        loaded: list[LoadedModel] = []
        try:
            for _ in range(settings.instances):
                loaded.append(runtime.load(model_path, options))
        except BaseException:
            _close_all(loaded)
            raise
        return cls(
            [model.run for model in loaded],
            info.inputs,
            settings,
            on_close=lambda: _close_all(loaded),
            axes=axes,
        )

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(drain=True)

    def submit(self, feeds: dict[str, np.ndarray], *, key: str | None = None) -> Future[Response]:
        """Queue one request (rows along dim 0) and return its future at once.

        Raises InvalidSpec for a malformed request, QueueFull when max_queue requests wait
        already, PipelineClosed after `close`.
        """
        rows, signature = self._check(feeds)
        request = _Request(feeds, rows, signature, Future())
        with self._lock:
            if self._closing:
                raise PipelineClosed("The pipeline is shutting down; the request was not queued.")
            if self._waiting >= self.settings.max_queue:
                raise QueueFull(
                    f"The queue is full ({self.settings.max_queue} requests waiting); "
                    "request refused.",
                    hint="Retry later, add instances, or raise max_queue.",
                )
            self._waiting += 1
        instance = self._instances[self._route(key)]
        with instance.condition:
            bucket = instance.buckets.get(signature) or instance.buckets.setdefault(
                signature, _Bucket()
            )
            bucket.queue.append(request)
            bucket.rows += rows
            instance.queued_rows += rows
            instance.condition.notify()
        return request.future

    def infer(
        self, feeds: dict[str, np.ndarray], *, key: str | None = None, timeout: float | None = None
    ) -> Response:
        """Submit and wait for the response (raises the request's error)."""
        return self.submit(feeds, key=key).result(timeout=timeout)

    async def infer_async(
        self, feeds: dict[str, np.ndarray], *, key: str | None = None
    ) -> Response:
        """Submit and await the response without blocking the event loop."""
        return await asyncio.wrap_future(self.submit(feeds, key=key))

    def record_batches(self) -> list[BatchRecord]:
        """Start recording every batch from now on; returns the list the records go to."""
        self._trace = []
        return self._trace

    def close(self, *, drain: bool = True, timeout: float | None = None) -> None:
        """Stop taking requests; run what is queued (drain) or fail it with Cancelled."""
        with self._lock:
            self._closing = True
        if not drain:
            self._cancel_queued()
        for instance in self._instances:
            with instance.condition:
                instance.condition.notify_all()
        for thread in self._threads:
            thread.join(timeout)
        if self._on_close is not None:
            self._on_close()
            self._on_close = None

    def _route(self, key: str | None) -> int:
        if len(self._instances) == 1:
            return 0
        return self.balancer.choose([inst.rows_ahead for inst in self._instances], key)

    def _check(self, feeds: dict[str, np.ndarray]) -> tuple[int, Signature]:
        """The request's rows and signature, checked against the inputs once per layout: a
        request laid out as one checked before (names, dtypes, shapes) reuses that answer,
        since the checks read nothing else (30 us per request on a small image otherwise)."""
        try:
            layout = tuple((name, array.dtype, array.shape) for name, array in feeds.items())
        except AttributeError:  # not arrays: the full check names the input
            layout = None
        known = self._checked.get(layout) if layout is not None else None
        if known is not None:
            return known
        checked = self._check_layout(feeds)
        shared = any(self.axes.inputs.get(spec.name, 0) is None for spec in self.inputs)
        if layout is not None and not shared and len(self._checked) < CHECKED_LAYOUTS:
            self._checked[layout] = checked  # a shared input's value is in its signature
        return checked

    def _check_layout(self, feeds: dict[str, np.ndarray]) -> tuple[int, Signature]:
        names = {spec.name for spec in self.inputs}
        if set(feeds) != names:
            raise InvalidSpec(
                f"Request inputs {sorted(feeds)} do not match the model's {sorted(names)}.",
                hint="Send one array per model input, by name.",
            )
        axes = self.axes.inputs
        checked = [_check_tensor(s, feeds[s.name], axes.get(s.name, 0)) for s in self.inputs]
        rows = {count for count in checked if count is not None}
        if len(rows) != 1:
            raise InvalidSpec(f"Request inputs disagree on the batch dim: {sorted(rows)}.")
        count = rows.pop()
        if not 1 <= count <= self.settings.max_batch_size:
            raise InvalidSpec(
                f"A request carries {count} rows; it must carry 1..{self.settings.max_batch_size} "
                "(max_batch_size).",
            )
        signature = tuple(
            _signature(spec.name, feeds[spec.name], axes.get(spec.name, 0)) for spec in self.inputs
        )
        return count, signature

    def _serve(self, instance: _Instance) -> None:
        while True:
            batch = self._next_batch(instance)
            if batch is None:
                return
            self._run(instance, batch, time.perf_counter())

    def _next_batch(self, instance: _Instance) -> list[_Request] | None:
        with instance.condition:
            while True:
                batch, wait = self._ready(instance, time.perf_counter())
                if batch:
                    return batch
                if self._closing and not instance.queued_rows:
                    return None
                instance.condition.wait(wait)

    def _ready(self, instance: _Instance, now: float) -> tuple[list[_Request], float | None]:
        """A batch to send now, or none and how long to wait for the next timeout."""
        settings, due, wait = self.settings, [], None
        for signature, bucket in instance.buckets.items():
            queue, rows = bucket.queue, bucket.rows
            if not queue:
                continue
            left = queue[0].arrived + settings.timeout_s - now
            if rows >= settings.dispatch_threshold() or left <= 0 or self._closing:
                due.append((queue[0].arrived, signature, rows))
            else:
                wait = left if wait is None else min(wait, left)
        if not due:
            return [], wait
        _, signature, rows = min(due)
        return self._cut(instance, instance.buckets[signature], settings.cut_size(rows)), None

    def _cut(self, instance: _Instance, bucket: _Bucket, size: int) -> list[_Request]:
        queue = bucket.queue
        batch, rows = [queue.popleft()], 0
        rows = batch[0].rows
        while queue and rows + queue[0].rows <= size:
            rows += queue[0].rows
            batch.append(queue.popleft())
        bucket.rows -= rows
        instance.queued_rows -= rows
        instance.running_rows = rows
        with self._lock:
            self._waiting -= len(batch)
        return batch

    def _run(self, instance: _Instance, batch: list[_Request], started: float) -> None:
        rows = sum(request.rows for request in batch)
        try:
            feeds = _concat([request.feeds for request in batch], self.axes.inputs)
            run_start = time.perf_counter()
            outputs = instance.runner(feeds)
            run_end = time.perf_counter()
            _check_outputs(outputs, rows, self.axes.outputs)
        except Exception as exc:  # noqa: BLE001 - the batch's callers get the error
            self._fail(batch, exc)
        else:
            finished = time.perf_counter()
            if self._trace is not None:
                record = BatchRecord(
                    instance.index, rows, len(batch), batch[0].arrived, started, run_start, run_end
                )
                self._trace.append(record)
            self.balancer.observe(instance.index, (finished - started) / rows)
            self._deliver(instance, batch, outputs, started, finished, run_end - run_start)
        finally:
            instance.running_rows = 0

    def _deliver(
        self,
        instance: _Instance,
        batch: list[_Request],
        outputs: list[np.ndarray],
        started: float,
        finished: float,
        run_s: float,
    ) -> None:
        rows = sum(request.rows for request in batch)
        self.stats.batches += 1
        self.stats.rows += rows
        self.stats.batch_sizes[rows] = self.stats.batch_sizes.get(rows, 0) + 1
        offset, compute_ms = 0, (finished - started) * 1000
        for request in batch:
            part = [
                _rows(output, offset, request.rows, _output_axis(self.axes.outputs, index))
                for index, output in enumerate(outputs)
            ]
            offset += request.rows
            queue_ms = (started - request.arrived) * 1000
            answer = Response(part, queue_ms, compute_ms, rows, instance.index, run_s * 1000)
            request.future.set_result(answer)

    def _fail(self, batch: list[_Request], exc: Exception) -> None:
        self.stats.failed_batches += 1
        log.warning("batch of %d requests failed: %s", len(batch), first_line(exc))
        reason = exc.message if isinstance(exc, OptistudioError) else first_line(exc)
        error = InferenceFailed(
            f"The batch this request ran in ({len(batch)} requests) failed: {reason}",
            hint="Only this batch failed; other requests were served. Check the inputs.",
        )
        for request in batch:
            request.future.set_exception(error)

    def _cancel_queued(self) -> None:
        for instance in self._instances:
            with instance.condition:
                for bucket in instance.buckets.values():
                    bucket.rows = 0
                    while bucket.queue:
                        request = bucket.queue.popleft()
                        request.future.set_exception(
                            Cancelled("The pipeline shut down before this request ran.")
                        )
                        with self._lock:
                            self._waiting -= 1
                instance.queued_rows = 0


def _check_tensor(spec: TensorSpec, array: Any, axis: int | None = 0) -> int | None:
    """The rows `array` carries on its batch `axis` (None for a shared input), checked."""
    if not isinstance(array, np.ndarray):
        raise InvalidSpec(f"Input {spec.name!r} must be a numpy array, got {type(array).__name__}.")
    if str(array.dtype) != spec.dtype:
        raise InvalidSpec(
            f"Input {spec.name!r} has dtype {array.dtype}; the model takes {spec.dtype}.",
            hint=f"Convert it, e.g. array.astype('{spec.dtype}').",
        )
    if array.ndim != len(spec.shape) or (axis is not None and array.ndim == 0):
        where = "no batch axis" if axis is None else f"dim {axis} is the batch"
        raise InvalidSpec(
            f"Input {spec.name!r} has shape {list(array.shape)}; the model takes "
            f"{len(spec.shape)} dims {spec.shape} ({where})."
        )
    for index, dim in enumerate(spec.shape):
        if index != axis and isinstance(dim, int) and dim > 0 and array.shape[index] != dim:
            raise InvalidSpec(
                f"Input {spec.name!r} has size {array.shape[index]} at dim {index}; "
                f"the model needs {dim} (shape {spec.shape})."
            )
    return None if axis is None else int(array.shape[axis])


def _signature(name: str, array: np.ndarray, axis: int | None) -> tuple[Any, ...]:
    """What requests batched together share: the dims past the batch axis, and the whole
    value of an input without one (a sample rate), so requests that differ never mix."""
    if axis is None:
        return (name, str(array.dtype), array.shape, array.tobytes())
    return (name, str(array.dtype), array.shape[:axis] + array.shape[axis + 1 :])


def _concat(
    feeds: list[dict[str, np.ndarray]], axes: dict[str, int | None]
) -> dict[str, np.ndarray]:
    if len(feeds) == 1:
        return feeds[0]
    return {
        name: feeds[0][name]
        if axes.get(name, 0) is None
        else np.concatenate([feed[name] for feed in feeds], axis=axes.get(name, 0))
        for name in feeds[0]
    }


def _output_axis(axes: tuple[int | None, ...], index: int) -> int | None:
    return axes[index] if index < len(axes) else 0


def _rows(output: np.ndarray, offset: int, count: int, axis: int | None) -> np.ndarray:
    """One request's rows of a batch's output (the whole output when it has no batch axis)."""
    if axis is None:
        return output
    return output[(slice(None),) * axis + (slice(offset, offset + count),)]


def _check_outputs(outputs: list[np.ndarray], rows: int, axes: tuple[int | None, ...] = ()) -> None:
    for index, output in enumerate(outputs):
        axis = _output_axis(axes, index)
        if axis is None:
            continue
        if output.ndim <= axis or output.shape[axis] != rows:
            raise InferenceFailed(
                f"Output {index} has shape {list(output.shape)}, not {rows} rows on dim {axis}, "
                "so it cannot be split back to the requests.",
            )


def _instance_options(options: SessionOptions, settings: BatchingSettings) -> SessionOptions:
    updates: dict[str, Any] = {}
    if settings.memory_pool_ratio is not None:
        updates["memory_pool_ratio"] = settings.memory_pool_ratio
    return with_serving_threads(options, settings.instances).model_copy(update=updates)


def _close_all(models: list[LoadedModel]) -> None:
    for model in models:
        model.close()
