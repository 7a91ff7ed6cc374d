"""What a video run reports: per stream, in total, and the machine's real-time capacity.

Definitions (docs/BENCHMARKS.md "Video" uses them):
- a frame's latency runs from the moment its decoding starts (in real time: the moment it is
  due, i.e. the camera delivered it) to the moment its result is handed back to its stream;
- a stream's fps is the results handed back over the time from its start to its last result;
- a frame is dropped when a real-time stream's buffer is full as a new one arrives (the policy
  picks which frames go); every dropped frame is counted;
- on a detector, a stream's boxes per frame count the boxes NMS kept on each of its frames
  (`optistudio.core.video.detections`), averaged over its frames;
- CPU share: decode and preprocessing are timed with each decode thread's own CPU clock
  (`time.thread_time`); inference is the rest of the process's CPU time over the run (the
  runtime's threads, batching and hand-back), so it is named `inference_and_serving`.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.metrics import unit_of

REALTIME_FPS_SHARE = 0.95
"""A real-time stream holds when it delivers at least this share of its frame rate..."""


class StreamReport(BaseModel):
    """One stream's figures."""

    model_config = ConfigDict(extra="forbid")

    stream: int
    source: str = Field(description="File name the stream plays.")
    offset_s: float = Field(description="Where in the file the stream started.")
    frame_rate: float = Field(description="The file's frame rate.")
    frames: int = Field(description="Results handed back.")
    dropped: int = Field(description="Frames dropped by the drop policy.")
    fps: float
    p50_ms: float
    p99_ms: float
    boxes_per_frame: float | None = Field(
        default=None, description="On a detector: mean boxes kept by NMS per frame."
    )

    def holds_realtime(self) -> bool:
        """At least 95 % of its frame rate, with p99 latency within one frame interval."""
        interval_ms = 1000.0 / self.frame_rate
        return self.fps >= REALTIME_FPS_SHARE * self.frame_rate and self.p99_ms <= interval_ms


class CpuShare(BaseModel):
    """Where the process's CPU time went over a run (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    decode_s: float = Field(description="CPU seconds of the decode threads (decode + resize).")
    inference_and_serving_s: float = Field(description="The rest of the process's CPU seconds.")
    decode_share: float
    inference_share: float
    method: str = "decode: per-thread CPU clock; inference: process CPU minus decode"


class VideoRun(BaseModel):
    """One run of N streams under one batching setting."""

    model_config = ConfigDict(extra="forbid")

    streams: list[StreamReport]
    pacing: Literal["realtime", "fast"]
    drop_policy: str
    decoder: str
    decoding: Literal["hardware", "software"] = Field(
        default="software", description="Whether `decoder` is a hardware decoder."
    )
    detector: str | None = Field(
        default=None, description="On a detector: which outputs were read as boxes, and the NMS."
    )
    max_batch_size: int
    timeout_ms: float
    seconds: float = Field(description="Wall time from start to the last result.")
    frames: int
    dropped: int
    fps: float = Field(description="Results per second over all streams.")
    p50_ms: float | None = Field(default=None, description="Frame latency p50 over all streams.")
    p99_ms: float | None = Field(default=None, description="Frame latency p99 over all streams.")
    mean_batch_size: float
    cpu: CpuShare

    def holds_realtime(self) -> bool:
        return all(stream.holds_realtime() for stream in self.streams)


class Capacity(BaseModel):
    """How many real-time streams the machine holds for the model, and how it was found."""

    model_config = ConfigDict(extra="forbid")

    streams: int = Field(description="Largest stream count whose every stream held real time.")
    frame_rate: float
    tried: dict[int, bool] = Field(description="Stream count -> whether every stream held.")
    rule: str = (
        "every stream delivers >= 95% of its frame rate and its p99 latency is within one "
        "frame interval"
    )


class VideoReport(BaseModel):
    """A video run, its per-frame baseline (max batch 1) and optionally the capacity search."""

    model_config = ConfigDict(extra="forbid")

    model: str
    backend: str
    input_shape: list[int] = Field(description="One frame's input tensor, batch axis first.")
    threads: int | None = Field(default=None, description="Intra-op threads of the runtime.")
    batched: VideoRun
    per_frame: VideoRun | None = None
    speedup: float | None = Field(
        default=None, description="Batched fps over per-frame fps, same streams and pacing."
    )
    capacity: Capacity | None = None
    batched_rewrite: str = Field(
        default="",
        description="Set when the model's batch was fixed at 1 and the run served its checked "
        "rewrite with a free batch (optistudio.core.batching.fixed_batch): one line.",
    )
    instances: int = Field(default=1, ge=1, description="Sessions of the model served at once.")
    batch_refused: str = Field(
        default="",
        description="Set when the model's batch is fixed at 1 and its rewrite was refused: "
        "why, and that the run served it at batch 1 on `instances` sessions instead.",
    )

    def metric_values(self) -> dict[str, float]:
        """The run's figures under the metric table's names, as Compare shows them beside
        benchmark results: total fps as throughput, frame latency over all streams, the mean
        and slowest stream's fps, drops, and the speedup and capacity when measured."""
        run = self.batched
        fps = [stream.fps for stream in run.streams]
        values = {
            "throughput": run.fps,
            "p50_ms": run.p50_ms,
            "p99_ms": run.p99_ms,
            "streams": float(len(run.streams)),
            "stream_fps": float(np.mean(fps)) if fps else 0.0,
            "stream_fps_min": min(fps, default=0.0),
            "dropped": float(run.dropped),
            "decode_cpu_share": run.cpu.decode_share,
            "speedup_vs_per_frame": self.speedup,
            "realtime_streams": None if self.capacity is None else float(self.capacity.streams),
        }
        return {name: float(value) for name, value in values.items() if value is not None}

    def measurement_rows(self) -> list[tuple[str, int, int, str, float, str]]:
        """Long rows (backend, max batch size, threads, metric, value, unit) for storage."""
        key = (self.backend, self.batched.max_batch_size, self.threads or 0)
        return [(*key, name, value, unit_of(name)) for name, value in self.metric_values().items()]


def latency_quantiles(latencies_ms: list[float]) -> tuple[float, float]:
    """(p50, p99) in ms; (0, 0) for no frames."""
    if not latencies_ms:
        return 0.0, 0.0
    p50, p99 = np.percentile(np.asarray(latencies_ms), [50, 99])
    return float(p50), float(p99)
