"""Load generator for a Pipeline: open loop (constant or Poisson arrivals) or closed loop.

Open loop sends on a fixed schedule whatever the answers do (arrival times drawn from `seed`),
so queueing shows as latency; closed loop keeps N clients each with one request in flight.
A run stops after `requests` sends or `seconds`, whichever comes first. Latency is measured from
the moment a request was handed to the pipeline, split into queue wait (until its batch started)
and compute (its batch's run), and summarised by `optistudio.core.batching.results.summarize`. The
pipeline's batches are recorded too (`LoadRun.batches`, on the run's clock), so a run can be
replayed batch by batch against the simulator (`optistudio.core.batching.trace`).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from optistudio.core.batching.collector import frozen_heap
from optistudio.core.batching.pipeline import Pipeline, Response
from optistudio.core.batching.results import BatchRecord, LoadResult, summarize
from optistudio.core.batching.simulate import Process
from optistudio.core.errors import InvalidSpec, OptistudioError


@dataclass
class LoadRun:
    """A finished load run: the summary and each request's times (ms from the run's start)."""

    result: LoadResult
    sent_ms: list[float] = field(default_factory=list)
    queue_ms: list[float] = field(default_factory=list)
    compute_ms: list[float] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)
    delays_ms: list[float] = field(default_factory=list)
    """Per served request, what neither its queue wait nor its batch's runner call holds: the
    way in (send to queue), the stacking, and the way back after the run (the outputs' check,
    the hand-back, the callback): `handoff.serving_delays` keeps them."""
    errors: list[str] = field(default_factory=list)
    batches: list[BatchRecord] = field(default_factory=list)
    note: str = ""
    """Set when a model whose batch is fixed at 1 was served through its checked rewrite."""


class _Recorder:
    def __init__(self) -> None:
        self.sent: list[float] = []
        self.started: list[float] = []
        self.finished: list[float] = []
        self.batch: list[int] = []
        self.beside: list[float] = []  # latency - queue wait - runner call, ms
        self.rejected, self.failed = 0, 0
        self.errors: list[str] = []
        self.lock = threading.Condition()
        self.outstanding = 0
        self.origin = time.perf_counter()

    def send(self, pipeline: Pipeline, feeds: dict[str, np.ndarray]) -> Future[Response] | None:
        with self.lock:
            index = len(self.sent)
            self.sent.append(time.perf_counter() - self.origin)
            self.started.append(np.nan)
            self.finished.append(np.nan)
            self.batch.append(0)
            self.beside.append(np.nan)
            self.outstanding += 1
        try:
            future = pipeline.submit(feeds)
        except OptistudioError as exc:
            self._refused(exc)
            return None
        future.add_done_callback(lambda f: self._done(index, f))
        return future

    def _refused(self, exc: OptistudioError) -> None:
        with self.lock:
            self.outstanding -= 1
            self.rejected += 1
            if len(self.errors) < 10:
                self.errors.append(exc.message)

    def _done(self, index: int, future: Future[Response]) -> None:
        now = time.perf_counter() - self.origin
        error = future.exception()
        with self.lock:
            self.outstanding -= 1
            self.lock.notify_all()
            if error is not None:
                self.failed += 1
                if len(self.errors) < 10:  # the message: the pipeline's hint is for callers
                    text = error.message if isinstance(error, OptistudioError) else str(error)
                    self.errors.append(text)
                return
            response = future.result()
            self.finished[index] = now
            self.started[index] = now - response.compute_ms / 1000
            self.batch[index] = response.batch_size
            latency_ms = (now - self.sent[index]) * 1000
            self.beside[index] = latency_ms - response.queue_ms - response.run_ms


def run_load(
    pipeline: Pipeline,
    feeds: Sequence[dict[str, np.ndarray]],
    *,
    process: Process = "poisson",
    rate: float | None = None,
    clients: int = 0,
    requests: int | None = None,
    seconds: float | None = None,
    seed: int = 0,
    warmup_share: float = 0.1,
) -> LoadRun:
    """Drive `pipeline` with requests cycling through `feeds`; waits for every answer. The
    heap alive before the run is kept out of Python's collections during it (`frozen_heap`),
    as `optistudio serve` keeps it while it serves."""
    if not feeds:
        raise InvalidSpec("The load generator needs at least one request to send.")
    if requests is None and seconds is None:
        raise InvalidSpec("Give a number of requests or a duration in seconds.")
    with frozen_heap():
        recorder = _Recorder()
        batches = pipeline.record_batches()
        if process == "closed":
            _closed_loop(pipeline, feeds, recorder, clients, requests, seconds)
        else:
            _open_loop(pipeline, feeds, recorder, process, rate, requests, seconds, seed)
        run = _finish(recorder, rate if process != "closed" else None, warmup_share)
    run.batches = [_on_run_clock(record, recorder.origin) for record in batches]
    return run


def _open_loop(
    pipeline: Pipeline,
    feeds: Sequence[dict[str, np.ndarray]],
    recorder: _Recorder,
    process: Process,
    rate: float | None,
    requests: int | None,
    seconds: float | None,
    seed: int,
) -> None:
    if rate is None or rate <= 0:
        raise InvalidSpec(f"An open-loop arrival rate must be positive, got {rate}.")
    schedule = send_schedule(process, rate, requests=requests, seconds=seconds, seed=seed)
    # no future is kept: the recorder counts what is outstanding and `_finish` waits for it.
    # Kept, every request's future, lock and answer lived to the end of the run, and Python's
    # full collections, which walk every live object, stopped the sender and the serving
    # threads for 90-145 ms several times a run (a 0.1 ms CNN at 3,600 req/s: p99 71-84 ms
    # measured, 1.9-2.3 ms with the collector off)
    for index, due in enumerate(schedule):
        delay = due - (time.perf_counter() - recorder.origin)
        if delay > 0:
            time.sleep(delay)
        recorder.send(pipeline, feeds[index % len(feeds)])


def send_schedule(
    process: Process,
    rate: float,
    *,
    requests: int | None = None,
    seconds: float | None = None,
    seed: int = 0,
) -> np.ndarray:
    """The send times (seconds from the run's start, ascending) an open-loop run aims at:
    `requests` of them, or as many as fall within `seconds`; the same for the same arguments,
    so a prediction made before a run can replay the very arrivals the run will send (late
    only where the sender falls behind)."""
    count = requests if requests is not None else int(np.ceil(rate * (seconds or 0))) + 1
    schedule = _schedule(process, rate, count, seed)
    if seconds is not None:
        schedule = schedule[schedule <= seconds]
    return schedule


def _schedule(process: Process, rate: float, count: int, seed: int) -> np.ndarray:
    if process == "constant":
        return np.arange(count) / rate
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, count)
    return np.cumsum(gaps) - gaps[0]


def _closed_loop(
    pipeline: Pipeline,
    feeds: Sequence[dict[str, np.ndarray]],
    recorder: _Recorder,
    clients: int,
    requests: int | None,
    seconds: float | None,
) -> None:
    if clients < 1:
        raise InvalidSpec("A closed loop needs at least one client.")
    deadline = time.perf_counter() + (seconds if seconds is not None else float("inf"))
    budget = [requests if requests is not None else float("inf")]
    lock = threading.Lock()

    def client(offset: int) -> None:
        turn = offset
        while time.perf_counter() < deadline:
            with lock:
                if budget[0] <= 0:
                    return
                budget[0] -= 1
            future = recorder.send(pipeline, feeds[turn % len(feeds)])
            turn += clients
            _wait([future])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _wait(futures: Sequence[Future[Response] | None]) -> None:
    for future in futures:
        if future is not None:
            future.exception()


def _on_run_clock(record: BatchRecord, origin: float) -> BatchRecord:
    times = ("oldest", "cut", "run_start", "run_end")
    return dataclasses.replace(record, **{name: getattr(record, name) - origin for name in times})


def _finish(recorder: _Recorder, rate: float | None, warmup_share: float) -> LoadRun:
    with recorder.lock:
        recorder.lock.wait_for(lambda: recorder.outstanding == 0)  # callbacks trail the futures
        if recorder.errors and np.isnan(np.asarray(recorder.finished, dtype=np.float64)).all():
            raise InvalidSpec(f"No request was served: {recorder.errors[0]}")  # the cause
        result = summarize(
            recorder.sent,
            recorder.started,
            recorder.finished,
            recorder.batch,
            rejected=recorder.rejected,
            failed=recorder.failed,
            rate=rate,
            warmup_share=warmup_share,
        )
        sent = np.asarray(recorder.sent)
        served = ~np.isnan(np.asarray(recorder.finished))
        finished, started = np.asarray(recorder.finished), np.asarray(recorder.started)
        return LoadRun(
            result=result,
            sent_ms=(sent[served] * 1000).tolist(),
            queue_ms=((started - sent)[served] * 1000).tolist(),
            compute_ms=((finished - started)[served] * 1000).tolist(),
            latency_ms=((finished - sent)[served] * 1000).tolist(),
            delays_ms=np.asarray(recorder.beside)[served].tolist(),
            errors=list(recorder.errors),
        )
