"""Where a request's time goes: pre-processing, inference, post-processing, each timed alone.

Pre-processing is the studio's own image pipeline (`optistudio.core.data.images`: decode, resize, colour,
normalise, layout) on the user's images, or on synthetic 640x480 PNGs when none are given; it
is timed per batch from file bytes to the input tensor. Inference runs that tensor (or
synthetic inputs without a pipeline) on the backend. Post-processing applies the declared
steps to the first output with numpy: softmax / sigmoid over the last axis, argmax, top-5.
Each stage's figure is the median over `runs` batches; shares are of the sum of the medians.
Queue wait belongs to a serving run with dynamic batching and is not measured here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import numpy as np
from PIL import Image
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.backends import get_backend
from optistudio.core.backends.target import RunsOnTarget, Threads
from optistudio.core.data.images import ImageDataset, ImagePreprocessing
from optistudio.core.data.model_inputs import ModelInputs
from optistudio.core.errors import InvalidSpec
from optistudio.core.model.info import ModelInfo
from optistudio.core.model.intake import inspect_model

PostStep = Literal["softmax", "sigmoid", "argmax", "top5"]
StageName = Literal["pre-processing", "inference", "post-processing"]
SYNTHETIC_IMAGE_SIZE = (640, 480)


class PipelineSpec(ModelInputs, RunsOnTarget):
    """A user-declared serving pipeline around the model."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["onnxruntime", "openvino"] = Field(
        default="onnxruntime", description="Backend the inference stage runs on."
    )
    batch_size: int = Field(default=1, ge=1, le=1024, description="Requests per batch.")
    runs: int = Field(default=20, ge=1, le=10_000, description="Batches timed per stage.")
    image_preprocessing: ImagePreprocessing | None = Field(
        default=None, description="Image pre-processing before the model; empty = none."
    )
    images: str | None = Field(
        default=None,
        description="Folder or .zip of images to pre-process; empty = synthetic 640x480 PNGs.",
    )
    postprocessing: list[PostStep] = Field(
        default_factory=list, description="Steps applied to the first output, in order."
    )
    threads: Threads = None


class Stage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stage: StageName
    ms: float = Field(description="Median ms per batch.")
    share: float
    detail: str


class Breakdown(BaseModel):
    model_config = ConfigDict(extra="forbid")

    batch_size: int
    stages: list[Stage]
    notes: list[str] = Field(default_factory=list)


def layered_breakdown(
    model_path: Path, spec: PipelineSpec, *, work_dir: Path, info: ModelInfo | None = None
) -> Breakdown:
    """Time each stage of the declared pipeline. Raises DataMismatch for images that do not fit."""
    info = info or inspect_model(model_path)
    timings: list[tuple[StageName, float, str]] = []
    notes = []
    batch = spec.batch_size
    if spec.image_preprocessing is not None:
        dataset, source = _images(spec, info, work_dir)
        feeds = next(iter(dataset.batches()))
        pre_ms = _median_ms(lambda: next(iter(dataset.batches())), spec.runs)
        timings.append(("pre-processing", pre_ms, f"{dataset.description} ({source})"))
    else:
        feeds, batch = _model_inputs(spec, info)
        notes.append("No pre-processing declared: inference ran on synthetic inputs.")
    model = get_backend(spec.backend).load(model_path, spec.run_target.session_options())
    try:
        outputs = model.run(feeds)
        infer_ms = _median_ms(lambda: model.run(feeds), spec.runs)
    finally:
        model.close()
    timings.append(("inference", infer_ms, f"{spec.backend}, batch {batch}"))
    if spec.postprocessing:
        first = outputs[0]
        post_ms = _median_ms(lambda: postprocess(first, spec.postprocessing), spec.runs)
        timings.append(("post-processing", post_ms, " -> ".join(spec.postprocessing)))
    else:
        notes.append("No post-processing declared.")
    total = sum(ms for _, ms, _ in timings) or 1.0
    stages = [Stage(stage=name, ms=ms, share=ms / total, detail=d) for name, ms, d in timings]
    return Breakdown(batch_size=batch, stages=stages, notes=notes)


def _model_inputs(spec: PipelineSpec, info: ModelInfo) -> tuple[dict[str, np.ndarray], int]:
    """Inputs without a pre-processing stage (the spec's arrays, shapes and values, the rest
    synthetic) and their batch: the spec's, or the one full shapes imply."""
    feeds, batch, _ = spec.user_feeds(info.inputs, batch_size=spec.batch_size)
    return feeds, batch


def postprocess(output: np.ndarray, steps: list[PostStep]) -> np.ndarray:
    """Apply the declared steps in order to one output array (last axis = classes)."""
    value = np.asarray(output)
    for step in steps:
        if step == "softmax":
            shifted = np.exp(value - value.max(axis=-1, keepdims=True))
            value = shifted / shifted.sum(axis=-1, keepdims=True)
        elif step == "sigmoid":
            value = 1.0 / (1.0 + np.exp(-value))
        elif step == "argmax":
            value = value.argmax(axis=-1)
        else:
            value = np.argsort(-value, axis=-1)[..., :5]
    return value


def _images(spec: PipelineSpec, info: ModelInfo, work_dir: Path) -> tuple[ImageDataset, str]:
    assert spec.image_preprocessing is not None
    if spec.images:
        source, label = Path(spec.images), "your images"
        if not source.exists():
            raise InvalidSpec(f"The image source {source} does not exist.")
    else:
        source, label = _synthetic_images(work_dir / "images", spec.batch_size), "synthetic PNGs"
    dataset = ImageDataset(
        source, info.inputs, spec.image_preprocessing, batch_size=spec.batch_size
    )
    return dataset, label


def _synthetic_images(folder: Path, count: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    width, height = SYNTHETIC_IMAGE_SIZE
    for index in range(count):
        pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"image{index:04d}.png")
    return folder


def _median_ms(call: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return float(np.median(times))
