"""Playing N video streams through one batching pipeline, results back per stream in order.

Each stream has a decode thread: it waits until its next frame is due (real time: frame i of
a stream at start + i / frame_rate; fast: at once), decodes and preprocesses it, and puts it in
the stream's buffer. Up to `in_flight` frames of a stream are in the Pipeline at once, submitted
with the stream's id as key, so frames of different streams meet in one batch. Results are
handed back in frame order: a finished frame waits for its stream's earlier ones.

When the buffer is full as a frame arrives, a real-time stream drops (the oldest buffered frame,
or all of them to skip to the newest) and counts it; a fast stream waits instead, so it never
drops and its pace is the pipeline's.

On a detector (a `BoxReader` given), each frame's outputs, split off the batch by the Pipeline,
go through NMS on their own as the frame is handed back (`optistudio.core.video.detections`):
frames of other streams in the same batch never suppress or add to its boxes.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from optistudio.core.batching.applicability import StackAxes
from optistudio.core.batching.pipeline import Pipeline, Response, Runner
from optistudio.core.data.images import preprocess
from optistudio.core.errors import InvalidSpec, OptistudioError
from optistudio.core.model.info import TensorSpec
from optistudio.core.video.decode import FrameSource
from optistudio.core.video.detections import BoxReader, FrameBoxes
from optistudio.core.video.report import CpuShare, StreamReport, VideoRun, latency_quantiles
from optistudio.core.video.settings import VideoSettings


@dataclass(frozen=True)
class FrameResult:
    """One frame's outputs and, on a detector, its boxes after NMS."""

    outputs: list[np.ndarray]
    boxes: FrameBoxes | None = None


OnResult = Callable[[int, int, FrameResult], None]
"""Called with (stream, frame index, result) for every result, in each stream's frame order."""


@dataclass
class _Frame:
    index: int
    started: float
    feeds: dict[str, np.ndarray]
    future: Future[Response] | None = None


@dataclass
class _Stream:
    """One stream's buffer, frames in the pipeline and tallies, under one lock."""

    index: int
    source: FrameSource
    lock: threading.Condition = field(
        default_factory=lambda: threading.Condition(threading.RLock())
    )
    buffer: deque[_Frame] = field(default_factory=deque)
    pending: deque[_Frame] = field(default_factory=deque)
    in_flight: int = 0
    dropped: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    box_counts: list[int] = field(default_factory=list)
    last_result: float = 0.0
    decode_cpu_s: float = 0.0
    error: BaseException | None = None


class _Player:
    """The streams of one run around one pipeline."""

    def __init__(
        self,
        pipeline: Pipeline,
        spec: TensorSpec,
        size: tuple[int, int],
        settings: VideoSettings,
        on_result: OnResult | None,
        boxes: BoxReader | None = None,
    ) -> None:
        self.pipeline, self.spec, self.size = pipeline, spec, size
        self.settings, self.on_result, self.boxes = settings, on_result, boxes
        self.batch_sizes: list[int] = []
        self.stop_at = 0.0

    def play(self, streams: list[_Stream]) -> float:
        """Run every stream for the settings' seconds; returns the start time."""
        start = time.perf_counter()
        self.stop_at = start + self.settings.seconds
        threads = [
            threading.Thread(target=self._decode, args=(s, start), name=f"decode-{s.index}")
            for s in streams
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for stream in streams:
            self._drain(stream)
        return start

    def _decode(self, stream: _Stream, start: float) -> None:
        cpu_start, interval = time.thread_time(), 1.0 / stream.source.rate
        try:
            for index in range(1 << 62):
                due = start + index * interval if self.settings.realtime else time.perf_counter()
                if due >= self.stop_at:
                    break
                time.sleep(max(0.0, due - time.perf_counter()))
                feeds = {self.spec.name: self._frame_tensor(stream)}
                self._offer(stream, _Frame(index, due, feeds))
        except (OptistudioError, RuntimeError) as exc:
            stream.error = exc
        finally:
            stream.decode_cpu_s = time.thread_time() - cpu_start

    def _frame_tensor(self, stream: _Stream) -> np.ndarray:
        image = stream.source.next_image()
        return preprocess(image, self.settings.preprocessing, self.size)[None]

    def _offer(self, stream: _Stream, frame: _Frame) -> None:
        with stream.lock:
            while len(stream.buffer) >= self.settings.buffer_frames:
                if self.settings.realtime:
                    self._drop(stream)
                else:
                    stream.lock.wait(0.1)
            stream.buffer.append(frame)
            self._pump(stream)

    def _drop(self, stream: _Stream) -> None:
        if self.settings.drop_policy == "skip_to_newest":
            stream.dropped += len(stream.buffer)
            stream.buffer.clear()
        else:
            stream.buffer.popleft()
            stream.dropped += 1

    def _pump(self, stream: _Stream) -> None:
        """Submit buffered frames while the stream has room in the pipeline (lock held)."""
        while stream.buffer and stream.in_flight < self.settings.in_flight:
            frame = stream.buffer.popleft()
            stream.in_flight += 1
            stream.pending.append(frame)
            frame.future = self.pipeline.submit(frame.feeds, key=str(stream.index))
            frame.future.add_done_callback(functools.partial(self._finished, stream))

    def _finished(self, stream: _Stream, _future: Future[Response]) -> None:
        with stream.lock:
            stream.in_flight -= 1
            while stream.pending and stream.pending[0].future.done():  # type: ignore[union-attr]
                self._hand_back(stream, stream.pending.popleft())
            self._pump(stream)
            stream.lock.notify_all()

    def _hand_back(self, stream: _Stream, frame: _Frame) -> None:
        assert frame.future is not None
        error = frame.future.exception()
        if error is not None:
            stream.error = stream.error or error
            return
        response = frame.future.result()
        now = time.perf_counter()
        stream.latencies_ms.append((now - frame.started) * 1000)
        stream.last_result = now
        self.batch_sizes.append(response.batch_size)
        try:  # a done-callback's exception would be swallowed: keep it for `play` to raise
            boxes = None if self.boxes is None else self.boxes(response.outputs)
        except (OptistudioError, ValueError) as exc:
            stream.error = stream.error or exc
            return
        if boxes is not None:
            stream.box_counts.append(len(boxes))
        if self.on_result is not None:
            self.on_result(stream.index, frame.index, FrameResult(response.outputs, boxes))

    def _drain(self, stream: _Stream) -> None:
        with stream.lock:
            while stream.buffer or stream.pending:
                self._pump(stream)
                stream.lock.wait(0.05)


def play(
    runners: Runner | Sequence[Runner],
    inputs: list[TensorSpec],
    sources: list[Path],
    settings: VideoSettings,
    *,
    size: tuple[int, int],
    on_result: OnResult | None = None,
    boxes: BoxReader | None = None,
    axes: StackAxes | None = None,
) -> VideoRun:
    """Play `settings.streams` streams of `sources` (round robin) through a Pipeline on the
    first `settings.batching.instances` of `runners` (one session each); each stream on a file
    starts at its own offset (k/m of the file for the k-th of m streams on it). `size` is the
    frames' (height, width) after preprocessing. With `boxes` (a detector), every frame's boxes
    are read and suppressed per frame of its stream. `axes`: where frames stack (the
    Pipeline's default: dim 0)."""
    spec = frame_input(inputs)
    serving = ([runners] if callable(runners) else list(runners))[: settings.batching.instances]
    streams = [_Stream(i, source) for i, source in enumerate(_sources(sources, settings))]
    for runner in serving:
        _warm_up(runner, spec, settings, size)
    process_cpu = time.process_time()
    with Pipeline(serving, inputs, settings.batching, axes=axes) as pipeline:
        player = _Player(pipeline, spec, size, settings, on_result, boxes)
        start = player.play(streams)
    process_cpu = time.process_time() - process_cpu
    error = next((s.error for s in streams if s.error is not None), None)
    if error is not None:
        raise error
    return _run_report(streams, player, settings, start, process_cpu)


def _warm_up(
    runner: Runner, spec: TensorSpec, settings: VideoSettings, size: tuple[int, int]
) -> None:
    """Run the largest batch once before the clock starts: a session's first runs allocate
    and would otherwise count as the first frames' latency."""
    pre = settings.preprocessing
    frame = (pre.channels, *size) if pre.layout == "NCHW" else (*size, pre.channels)
    rows = min(settings.batching.max_batch_size, settings.streams * settings.in_flight)
    runner({spec.name: np.zeros((rows, *frame), np.dtype(pre.dtype))})


def frame_input(inputs: list[TensorSpec]) -> TensorSpec:
    """The model's one image input (rank 4); InvalidSpec otherwise."""
    if len(inputs) != 1 or len(inputs[0].shape) != 4:
        shapes = {spec.name: spec.shape for spec in inputs}
        raise InvalidSpec(
            f"A video model takes one image input of rank 4 (a batch of frames); this one "
            f"takes {shapes}.",
            hint="Pick an image model with one [N, C, H, W] or [N, H, W, C] input.",
        )
    return inputs[0]


def _sources(paths: list[Path], settings: VideoSettings) -> list[FrameSource]:
    if not paths:
        raise InvalidSpec("A video run needs at least one source file.")
    files = [paths[i % len(paths)] for i in range(settings.streams)]
    sources = []
    for index, path in enumerate(files):
        mates = files.count(path)
        turn = files[:index].count(path)
        probe = FrameSource(path, hardware=settings.hardware_decode)
        offset = probe.duration * turn / mates
        sources.append(FrameSource(path, offset=offset, hardware=settings.hardware_decode))
    return sources


def _run_report(
    streams: list[_Stream],
    player: _Player,
    settings: VideoSettings,
    start: float,
    process_cpu: float,
) -> VideoRun:
    reports = [_stream_report(stream, start) for stream in streams]
    p50, p99 = latency_quantiles([ms for stream in streams for ms in stream.latencies_ms])
    end = max([start, *(stream.last_result for stream in streams)])
    frames = sum(report.frames for report in reports)
    decode = sum(stream.decode_cpu_s for stream in streams)
    rest = max(0.0, process_cpu - decode)
    total = decode + rest or 1.0
    return VideoRun(
        streams=reports,
        pacing="realtime" if settings.realtime else "fast",
        drop_policy=settings.drop_policy,
        decoder=streams[0].source.decoder,
        decoding="hardware" if streams[0].source.hardware else "software",
        detector=None if player.boxes is None else player.boxes.describe(),
        max_batch_size=settings.batching.max_batch_size,
        timeout_ms=settings.batching.timeout_ms,
        seconds=end - start,
        frames=frames,
        dropped=sum(report.dropped for report in reports),
        fps=frames / (end - start) if end > start else 0.0,
        p50_ms=p50,
        p99_ms=p99,
        mean_batch_size=float(np.mean(player.batch_sizes)) if player.batch_sizes else 0.0,
        cpu=CpuShare(
            decode_s=decode,
            inference_and_serving_s=rest,
            decode_share=decode / total,
            inference_share=rest / total,
        ),
    )


def _stream_report(stream: _Stream, start: float) -> StreamReport:
    p50, p99 = latency_quantiles(stream.latencies_ms)
    frames = len(stream.latencies_ms)
    elapsed = stream.last_result - start
    return StreamReport(
        stream=stream.index,
        source=stream.source.path.name,
        offset_s=stream.source.offset,
        frame_rate=stream.source.rate,
        frames=frames,
        dropped=stream.dropped,
        fps=frames / elapsed if frames and elapsed > 0 else 0.0,
        p50_ms=p50,
        p99_ms=p99,
        boxes_per_frame=float(np.mean(stream.box_counts)) if stream.box_counts else None,
    )
