"""What the Video page does, as plain functions that tests call without Streamlit.

The page never decodes or runs a model: it stores an uploaded clip like a dataset, commits a
video job and sends it by name; the worker plays the streams (`optistudio.workers.video_job`).
What the page shows of a finished job is read from its stored result here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, BinaryIO

import pandas as pd
import plotly.graph_objects as go
from pydantic import BaseModel, ConfigDict
from sqlalchemy.orm import Session, sessionmaker

from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.errors import InvalidSpec
from optistudio.db.models import JobKind
from optistudio.services.catalog import VIDEO_SUFFIXES, store_dataset
from optistudio.services.jobkinds import VIDEO, VideoJobSpec
from optistudio.services.jobresults import VideoJobResult
from optistudio.services.settings import Settings
from optistudio.studio.charts import stream_bars
from optistudio.studio.compare_services import result_key
from optistudio.studio.job_view import JobView
from optistudio.studio.jobs_services import SendTask, recent_jobs, submit_job

CLIP_TYPES = sorted(suffix.lstrip(".") for suffix in VIDEO_SUFFIXES)
"""What the clip uploader takes."""
REALTIME_NOTE = (
    " In real time both runs are capped at the clip's frame rate, so a ratio near 1 means "
    "both kept up; turn Real time off, or search the capacity, to see what batching buys."
)
STREAM_COLUMNS = ("stream", "source", "offset_s", "fps", "p50_ms", "p99_ms", "dropped", "frames")


class VideoForm(BaseModel):
    """What the page's form holds, before it becomes a job spec."""

    model_config = ConfigDict(extra="forbid")

    streams: int = 2
    seconds: float = 5.0
    realtime: bool = True
    drop_policy: str = "drop_oldest"
    max_batch_size: int = 8
    timeout_ms: float = 2.0
    backend: str = "onnxruntime"
    capacity: bool = False
    max_streams: int = 16


def build_spec(settings: Settings, form: VideoForm, clip: BinaryIO | None = None) -> VideoJobSpec:
    """The job spec; an uploaded clip (a file with a `name`, as Streamlit's uploads are) is
    stored first (ModelRejected for another file type), none means the worker generates one.
    pydantic's ValidationError names a bad field."""
    if clip is not None and Path(clip.name).suffix.lower() not in VIDEO_SUFFIXES:
        raise InvalidSpec(
            f"{clip.name!r} is not a video clip.",
            hint=f"Upload one of: {', '.join(sorted(VIDEO_SUFFIXES))}; or none for a generated one.",
        )
    stored = store_dataset(settings, clip, filename=clip.name) if clip else None
    batching = BatchingSettings(max_batch_size=form.max_batch_size, timeout_ms=form.timeout_ms)
    return VideoJobSpec(
        streams=form.streams,
        seconds=form.seconds,
        realtime=form.realtime,
        drop_policy=form.drop_policy,  # type: ignore[arg-type]  # validated by the spec
        batching=batching,
        backend=form.backend,
        capacity=form.capacity,
        max_streams=form.max_streams,
        clip_path=str(stored) if stored else None,
        clip_name=clip.name if clip else "",
    )


def submit_video(
    factory: sessionmaker[Session], *, model_id: int, spec: VideoJobSpec, send: SendTask
) -> int:
    """Commit the video job, then send its id by task name; returns the job id."""
    return submit_job(factory, kind=JobKind.video, model_id=model_id, spec=spec, send=send)


def video_jobs(
    factory: sessionmaker[Session], *, model_id: int | None = None, limit: int = 20
) -> list[JobView[VideoJobResult]]:
    """Recent video jobs (of the model when given), newest first, each with its typed result."""
    return recent_jobs(factory, kind=VIDEO, model_id=model_id, limit=limit)


def stream_rows(result: VideoJobResult) -> list[dict[str, Any]]:
    """One row per stream of the batched run: fps, latency p50/p99 and drops (and, on a
    detector, the boxes NMS kept per frame of that stream)."""
    columns = set(STREAM_COLUMNS)
    if result.batched.detector is not None:
        columns.add("boxes_per_frame")
    return [stream.model_dump(include=columns) for stream in result.batched.streams]


def compare_key(job_id: int, result: VideoJobResult) -> str:
    """The run's key among the Compare page's stored results (`job.backend.batch.threads`)."""
    return result_key(job_id, result.backend, result.batched.max_batch_size, result.threads or 0)


def streams_figure(result: VideoJobResult) -> go.Figure:
    """The per-stream bar chart, with the clip's frame rate as the real-time line."""
    rows = pd.DataFrame(stream_rows(result))
    rate = result.batched.streams[0].frame_rate if result.batched.streams else None
    return stream_bars(rows, rate if result.batched.pacing == "realtime" else None)


def capacity_sentence(result: VideoJobResult) -> str | None:
    """The capacity answer in words; None when the job did not search."""
    found = result.capacity
    if found is None:
        return None
    tried = ", ".join(
        f"{count} {'held' if held else 'did not hold'}" for count, held in found.tried.items()
    )
    if found.streams == 0:
        head = (
            f"This machine holds no real-time {found.frame_rate:g} fps stream of this model on "
            f"{result.backend}: even one stream fell behind."
        )
    else:
        plural = "stream" if found.streams == 1 else "streams"
        head = (
            f"This machine holds {found.streams} real-time {found.frame_rate:g} fps {plural} of "
            f"this model on {result.backend}."
        )
    return f"{head} Tried: {tried} (held: {found.rule})."


def speedup_sentence(result: VideoJobResult) -> str | None:
    """Batched against per-frame inference in words; None without the baseline."""
    if result.per_frame is None or result.speedup is None:
        return None
    batched, single = result.batched, result.per_frame
    if result.batch_refused:  # served at batch 1 on several sessions, against one
        return (
            f"On {result.instances} instances at batch 1: {batched.fps:.1f} fps in total; on "
            f"one (the per-frame baseline): {single.fps:.1f} fps, {single.dropped} dropped. "
            f"The instances give {result.speedup:.2f}x."
            + (REALTIME_NOTE if batched.pacing == "realtime" else "")
        )
    return (
        f"Batched across streams: {batched.fps:.1f} fps in total (mean batch "
        f"{batched.mean_batch_size:.2f}); per frame (max batch 1): {single.fps:.1f} fps, "
        f"{single.dropped} dropped. Batching gives {result.speedup:.2f}x."
        + (REALTIME_NOTE if batched.pacing == "realtime" else "")
    )


def run_facts(result: VideoJobResult) -> dict[str, str]:
    """The decoder, the pacing, the CPU split and the totals, as short labelled values."""
    run = result.batched
    cpu = run.cpu
    return {
        "decoder": f"{run.decoder} ({run.decoding})",
        "pacing": f"{run.pacing}, {run.drop_policy.replace('_', ' ')}",
        "batching": f"max batch {run.max_batch_size}, timeout {run.timeout_ms:g} ms"
        + (f", {result.instances} instances" if result.instances > 1 else ""),
        "total": f"{run.frames} frames in {run.seconds:.1f} s, {run.dropped} dropped",
        "CPU": f"decode {cpu.decode_share:.0%} · inference and serving {cpu.inference_share:.0%}",
        "input": "x".join(str(d) for d in result.input_shape),
        "clip": result.clip or "generated",
    }
