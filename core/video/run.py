"""A video run on a model file: load it once, play the streams batched, then the per-frame
baseline (max batch 1, same streams and pacing), and optionally search the real-time capacity.

Capacity search: real-time runs of `probe_seconds` at 1, 2, 4, ... streams until one fails to
hold (`VideoRun.holds_realtime`) or `max_streams` is reached, then bisection between the last
count that held and the first that failed. The answer is the largest count seen to hold; it
assumes holding is monotone in the count, which a noisy machine can break by one either way.

On a detector (outputs recognized as boxes) every run, baseline and probes included, reads each
frame's boxes and runs NMS on them per frame of its stream, so that cost is measured too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from optistudio.core.backends import get_backend
from optistudio.core.backends.target import RunTarget
from optistudio.core.batching.applicability import StackAxes, one_row_axes, require_batch_dim
from optistudio.core.batching.fixed_batch import Batchable, BatchRefused, batchable
from optistudio.core.batching.instances import instance_counts
from optistudio.core.batching.pipeline import Runner
from optistudio.core.batching.settings import (
    BatchingSettings,
    serving_target,
    with_serving_threads,
)
from optistudio.core.data.images import ImagePreprocessing
from optistudio.core.data.model_inputs import ModelInputs
from optistudio.core.errors import DataMismatch, InvalidSpec
from optistudio.core.model.info import ModelInfo, TensorSpec
from optistudio.core.model.intake import inspect_model
from optistudio.core.progress import ProgressCallback, ignore_progress, scaled
from optistudio.core.video.decode import clip_facts
from optistudio.core.video.detections import BoxReader, box_reader
from optistudio.core.video.engine import OnResult, frame_input, play
from optistudio.core.video.report import Capacity, VideoReport, VideoRun
from optistudio.core.video.settings import VideoSettings


@dataclass(frozen=True)
class _Served:
    """The model as a video run serves it: the file it loads (a batch fixed at 1 rewritten, or
    the model itself), the settings it is served on, and the facts read once from that file."""

    model: Batchable
    settings: VideoSettings
    refused: str
    """Why the batch could not be freed ('' when it was): served at batch 1 on instances."""
    info: ModelInfo
    axes: StackAxes | None
    spec: TensorSpec
    size: tuple[int, int]
    boxes: BoxReader | None


def run_video(
    model_path: Path,
    sources: list[Path],
    settings: VideoSettings,
    *,
    target: RunTarget | None = None,
    shapes: dict[str, list[int]] | None = None,
    baseline: bool = True,
    capacity_streams: int | None = None,
    probe_seconds: float = 3.0,
    progress: ProgressCallback = ignore_progress,
) -> VideoReport:
    """Play the streams on the model; `capacity_streams` (the most to try) turns on the search.

    `shapes` may give the image input's full shape (its batch entry is ignored): it sets the
    frame size when the model's is dynamic. `progress` hears of each phase as it starts (the
    batched run, the per-frame baseline, each capacity probe) and may raise Cancelled.
    """
    served = _served(Path(model_path), settings, shapes or {})
    count = served.settings.batching.instances
    backend, given = serving_target(target)
    options = with_serving_threads(given, count)
    runtime = get_backend(backend)
    loaded = [runtime.load(Path(served.model.path), options) for _ in range(count)]
    try:
        runners = [model.run for model in loaded]
        measured = scaled(progress, 0.0, 0.5 if capacity_streams else 1.0)
        report = _played(runners, served, sources, baseline, measured)
        if capacity_streams:
            report.capacity = _searched(
                runners, served, sources, capacity_streams, probe_seconds, progress
            )
    finally:
        for model in loaded:
            model.close()
    pre = served.settings.preprocessing
    return report.model_copy(
        update={
            "model": Path(model_path).name,
            "batched_rewrite": served.model.note,
            "instances": count,
            "batch_refused": served.refused,
            "backend": backend,
            "input_shape": [1, *_chw(served.spec, pre, served.size)],
            "threads": options.threads,
        }
    )


def _served(original: Path, settings: VideoSettings, shapes: dict[str, list[int]]) -> _Served:
    """The model with its batch freed (its checked rewrite when fixed at 1), else served at
    batch 1 on several sessions (`on_instances`), with the frame it takes."""
    one = {name: [1, *shape[1:]] for name, shape in shapes.items()}
    refused = ""
    try:  # a batch fixed at 1: its checked rewrite
        freed = batchable(original, ModelInputs(shapes=one))
    except BatchRefused as exc:  # else at batch 1 on several sessions
        freed, settings = Batchable(original), on_instances(settings)
        refused = (
            f"{exc.message} Served at batch 1 on {settings.batching.instances} instance(s) instead."
        )
    info = inspect_model(Path(freed.path))
    axes = one_row_axes(info) if refused else None
    if not refused:
        require_batch_dim(info)
    spec = frame_input(info.inputs)
    size = frame_size(spec, settings.preprocessing, shapes.get(spec.name))
    boxes = box_reader(Path(freed.path))
    return _Served(freed, settings, refused, info, axes, spec, size, boxes)


def _played(
    runners: list[Runner],
    served: _Served,
    sources: list[Path],
    baseline: bool,
    progress: ProgressCallback,
) -> VideoReport:
    """The batched run and, with `baseline`, the per-frame one (`measure`)."""
    return measure(
        runners,
        served.info.inputs,
        sources,
        served.settings,
        size=served.size,
        baseline=baseline,
        boxes=served.boxes,
        progress=progress,
        axes=served.axes,
    )


def _searched(
    runners: list[Runner],
    served: _Served,
    sources: list[Path],
    max_streams: int,
    probe_seconds: float,
    progress: ProgressCallback,
) -> Capacity:
    """The capacity search (`capacity`), on the second half of the progress."""
    searching = scaled(progress, 0.5, 1.0)
    searching(0.0, f"capacity search: up to {max_streams} real-time streams")
    return capacity(
        runners,
        served.info.inputs,
        sources,
        served.settings,
        served.size,
        max_streams,
        probe_seconds,
        on_probe=_probe_progress(searching, max_streams),
        boxes=served.boxes,
        axes=served.axes,
    )


def measure(
    runners: Runner | Sequence[Runner],
    inputs: list[TensorSpec],
    sources: list[Path],
    settings: VideoSettings,
    *,
    size: tuple[int, int],
    baseline: bool = True,
    on_result: OnResult | None = None,
    boxes: BoxReader | None = None,
    progress: ProgressCallback = ignore_progress,
    axes: StackAxes | None = None,
) -> VideoReport:
    """The batched run and, with `baseline`, the same streams at max batch 1 on one session."""
    progress(0.0, f"batched run: {settings.streams} stream(s) for {settings.seconds:g} s")
    batched = play(
        runners, inputs, sources, settings, size=size, on_result=on_result, boxes=boxes,
        axes=axes,
    )  # fmt: skip
    per_frame = None
    if baseline:
        single = at_batch_one(settings.batching, instances=1)
        progress(0.5, f"per-frame baseline (max batch 1, one session) for {settings.seconds:g} s")
        per_frame = play(
            runners,
            inputs,
            sources,
            settings.model_copy(update={"batching": single}),
            size=size,
            boxes=boxes,
            axes=axes,
        )
    speedup = batched.fps / per_frame.fps if per_frame and per_frame.fps else None
    return VideoReport(
        model="", backend="", input_shape=[], batched=batched, per_frame=per_frame, speedup=speedup
    )


def capacity(
    runners: Runner | Sequence[Runner],
    inputs: list[TensorSpec],
    sources: list[Path],
    settings: VideoSettings,
    size: tuple[int, int],
    max_streams: int,
    probe_seconds: float,
    *,
    on_probe: Callable[[int, VideoRun], None] | None = None,
    boxes: BoxReader | None = None,
    axes: StackAxes | None = None,
) -> Capacity:
    """The most real-time streams that hold (module docstring), up to `max_streams`."""
    tried: dict[int, bool] = {}

    def holds(count: int) -> bool:
        if count not in tried:
            probe = settings.model_copy(
                update={"streams": count, "seconds": probe_seconds, "realtime": True}
            )
            run = play(runners, inputs, sources, probe, size=size, boxes=boxes, axes=axes)
            tried[count] = run.holds_realtime()
            if on_probe is not None:
                on_probe(count, run)
        return tried[count]

    good, bad = 0, None
    count = 1
    while count <= max_streams and holds(count):
        good, count = count, count * 2
    bad = count if count <= max_streams else None
    if bad is None and good < max_streams and holds(max_streams):
        good = max_streams
    elif bad is None and good < max_streams:
        bad = max_streams
    while bad is not None and bad - good > 1:
        middle = (good + bad) // 2
        good, bad = (middle, bad) if holds(middle) else (good, middle)
    rate = clip_facts(sources[0])[0]
    return Capacity(streams=good, frame_rate=rate, tried=dict(sorted(tried.items())))


def _probe_progress(
    progress: ProgressCallback, max_streams: int
) -> Callable[[int, VideoRun], None]:
    """Reports each finished probe; the search tries about twice log2(max_streams) counts."""
    expected = 2 * max(1, max_streams.bit_length())
    done: list[int] = []

    def report(count: int, run: VideoRun) -> None:
        done.append(count)
        held = "held" if run.holds_realtime() else "did not hold"
        progress(min(len(done) / expected, 0.99), f"capacity probe: {count} stream(s) {held}")

    return report


def on_instances(settings: VideoSettings) -> VideoSettings:
    """`settings` for a model served at batch 1 as it is: max batch 1 on the instances asked
    for, or, when one was, on as many as `instance_counts` measures here (one per core)."""
    count = settings.batching.instances
    batching = at_batch_one(
        settings.batching, instances=count if count > 1 else instance_counts()[-1]
    )
    return settings.model_copy(update={"batching": batching})


def at_batch_one(batching: BatchingSettings, *, instances: int) -> BatchingSettings:
    """`batching` at max batch 1 (no preferred sizes, no eager cut) on `instances` sessions."""
    update = {"max_batch_size": 1, "preferred_batch_sizes": [], "eager_threshold": None}
    return batching.model_copy(update=update | {"instances": instances})


def frame_size(
    spec: TensorSpec, pre: ImagePreprocessing, shape: list[int] | None = None
) -> tuple[int, int]:
    """(height, width) of a frame: the preprocessing's size, else --shape's, else the model's
    fixed dims; InvalidSpec when none gives it or the channels disagree."""
    dims = list(shape) if shape else list(spec.shape)
    if len(dims) != 4:
        raise InvalidSpec(f"The shape of {spec.name!r} must have 4 dims, not {dims}.")
    channels, height, width = (
        (dims[1], dims[2], dims[3]) if pre.layout == "NCHW" else (dims[3], dims[1], dims[2])
    )
    if isinstance(channels, int) and channels > 0 and channels != pre.channels:
        raise DataMismatch(
            f"Input {spec.name!r} takes {channels} channel(s) in {pre.layout}; color "
            f"{pre.color} gives {pre.channels}.",
            hint="Pick the layout and color the model was trained with.",
        )
    if spec.dtype != pre.dtype:
        raise DataMismatch(
            f"Input {spec.name!r} takes {spec.dtype}; the preprocessing makes {pre.dtype}.",
            hint=f"Set the preprocessing dtype to {spec.dtype}.",
        )
    if pre.size is not None:
        return pre.size
    if not all(isinstance(d, int) and d > 0 for d in (height, width)):
        raise InvalidSpec(
            f"Input {spec.name!r} has a dynamic frame size {spec.shape}.",
            hint=f"Give it, e.g. --shape {spec.name}=1,3,224,224.",
        )
    return int(height), int(width)


def _chw(spec: TensorSpec, pre: ImagePreprocessing, size: tuple[int, int]) -> list[int]:
    return [pre.channels, *size] if pre.layout == "NCHW" else [*size, pre.channels]
