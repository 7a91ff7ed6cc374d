"""The video job: streams of a clip (uploaded, or generated here) played on the job's model,
frames batched across streams, measured per stream, with the per-frame baseline and, when
asked, the real-time capacity search (`optistudio.core.video.run`).

Progress is reported per phase (the batched run, the per-frame baseline, each capacity probe);
a cancel is seen at the next phase. The run's figures are stored as measurements too (total fps
as throughput, frame latency, per-stream fps, drops, speedup, capacity), with the environment,
so the Compare page picks a video run like any benchmark result.
"""

from __future__ import annotations

from pathlib import Path

from optistudio.core.data.inputs import resolve_shape
from optistudio.core.errors import InvalidSpec
from optistudio.core.machine.environment import fingerprint
from optistudio.core.model.info import ModelInfo
from optistudio.core.video.clips import generated_clip
from optistudio.core.video.report import VideoReport
from optistudio.core.video.run import run_video
from optistudio.db.models import Job
from optistudio.db.queries import MeasurementRow
from optistudio.services.artifact_store import local_data_file
from optistudio.services.jobkinds import VideoJobSpec
from optistudio.services.jobresults import VideoJobResult
from optistudio.services.settings import get_settings
from optistudio.workers.artifacts import model_of
from optistudio.workers.jobs import JobContext
from optistudio.workers.outcome import Done

"""The clip played when none was uploaded: 640x360 at 25 fps, as bench/video.py plays."""


def video_job(job: Job, spec: VideoJobSpec, context: JobContext) -> Done[VideoJobResult]:
    """Play the spec's streams on the job's model and store the engine's report."""
    model_path, info = model_of(job)
    clip, clip_label = _clip(job, spec)
    report = run_video(
        model_path,
        [clip],
        spec.settings(),
        target=spec.run_target,
        shapes=frame_shapes(info, spec),
        baseline=spec.baseline,
        capacity_streams=spec.max_streams if spec.capacity else None,
        probe_seconds=spec.probe_seconds,
        progress=context.progress,
    )
    result = VideoJobResult(**report.model_dump(), clip=clip_label)
    return Done(
        summary(report),
        result,
        environment=fingerprint(threads=report.threads),
        measurements=[MeasurementRow(*row) for row in report.measurement_rows()],
    )


def _clip(job: Job, spec: VideoJobSpec) -> tuple[Path, str]:
    """The clip on this worker and what to call it: the uploaded one, else one made in the
    job's folder (made again by a redelivered job: same seed, same frames)."""
    if spec.clip_path:
        return local_data_file(spec.clip_path), spec.clip_name or Path(spec.clip_path).name
    return generated_clip(get_settings().artifact_dir / "jobs" / str(job.id)), "generated"


def frame_shapes(info: ModelInfo, spec: VideoJobSpec) -> dict[str, list[int]]:
    """The image input's full shape from the spec: its shapes, else its dims (the model's
    input profile puts either there) when they fix every dynamic size; {} otherwise (the
    engine then takes the model's fixed size, or says which to give)."""
    if spec.shapes or len(info.inputs) != 1:
        return dict(spec.shapes)
    image = info.inputs[0]
    try:
        shape, guessed = resolve_shape(image, batch_size=1, dims=spec.dims)
    except InvalidSpec:
        return {}
    return {} if guessed else {image.name: list(shape)}


def summary(report: VideoReport) -> str:
    """The job's one-line message."""
    run = report.batched
    parts = [
        f"{len(run.streams)} stream(s) at {run.fps:.1f} fps in total",
        f"{run.dropped} dropped",
        f"decoder {run.decoder} ({run.decoding})",
    ]
    if report.speedup is not None:
        parts.append(f"{report.speedup:.2f}x per-frame")
    if report.capacity is not None:
        parts.append(
            f"holds {report.capacity.streams} real-time {report.capacity.frame_rate:g} fps "
            "stream(s)"
        )
    said = ", ".join(parts) + "."
    served = report.batched_rewrite or report.batch_refused
    return f"{said} {served}" if served else said
