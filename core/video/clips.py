"""Short synthetic clips made with PyAV's encoder: tests, samples and the benchmark need video
without downloading any. Each clip shows a few coloured rectangles moving across a dark
background, so consecutive frames differ and a model's outputs change from frame to frame."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import av
import numpy as np
from av.video.stream import VideoStream

CODECS = ("libx264", "mpeg4")
"""Encoders tried in order; the first this FFmpeg build has is used."""
GENERATED_SECONDS, GENERATED_FPS, GENERATED_SIZE = 4.0, 25, (360, 640)
"""The clip played when none is given (the Video page, `optistudio video` without --source)."""


def generated_clip(folder: Path) -> Path:
    """`folder`/generated.mp4: the clip a video run plays when it is given none (the same seed,
    so the same frames, every time)."""
    folder.mkdir(parents=True, exist_ok=True)
    return make_clip(
        folder / "generated.mp4", seconds=GENERATED_SECONDS, fps=GENERATED_FPS, size=GENERATED_SIZE
    )


def make_clip(
    path: Path,
    *,
    seconds: float = 2.0,
    fps: int = 25,
    size: tuple[int, int] = (180, 320),
    seed: int = 0,
) -> Path:
    """Write a clip of moving rectangles, `size` = (height, width), one keyframe a second.

    The keyframe interval keeps seeking cheap: a stream that starts at an offset decodes at
    most one second of frames it does not show.
    """
    height, width = size
    codec = next(name for name in CODECS if name in av.codecs_available)
    rng = np.random.default_rng(seed)
    boxes = _boxes(rng, height, width)
    with av.open(str(path), "w") as container:
        stream = cast(VideoStream, container.add_stream(codec, rate=fps))
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.gop_size = fps
        if codec == "libx264":
            stream.options = {"preset": "ultrafast"}
        for index in range(max(1, round(seconds * fps))):
            image = _draw(boxes, index, height, width, seed)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        container.mux(stream.encode())
    return path


def _boxes(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """Per rectangle: x, y, dx, dy, w, h, r, g, b."""
    count = 3
    sizes = rng.integers(
        max(2, min(height, width) // 8), max(3, min(height, width) // 3), (count, 2)
    )
    starts = rng.integers(0, [width, height], (count, 2))
    speeds = rng.integers(1, max(2, width // 40), (count, 2))
    colours = rng.integers(64, 256, (count, 3))
    return np.concatenate([starts, speeds, sizes, colours], axis=1)


def _draw(boxes: np.ndarray, index: int, height: int, width: int, seed: int) -> np.ndarray:
    image = np.full((height, width, 3), (16 + 8 * (seed % 8), 24, 48), np.uint8)
    for x0, y0, dx, dy, w, h, r, g, b in boxes:
        x, y = (x0 + dx * index) % width, (y0 + dy * index) % height
        image[y : y + h, x : x + w] = (r, g, b)
    return image
