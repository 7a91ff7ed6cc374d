"""Decoding one video file as an endless stream of frames with PyAV (FFmpeg).

A hardware decoder (`<codec>_cuvid`, NVIDIA's) is used when this FFmpeg build has one and it
opens on this machine; else the codec's software decoder. Either way the decoder's name is
recorded. Software decoding runs on the calling thread (FFmpeg's own threads off), so the
thread's CPU time is the decode's CPU time. A stream starts at an offset into the file and
loops back to the start at its end.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import av
from av.video.codeccontext import VideoCodecContext
from av.video.stream import VideoStream
from PIL import Image

from optistudio.core.errors import DataMismatch, first_line

log = logging.getLogger(__name__)

_VIDEO_ERRORS = (av.FFmpegError, OSError, ValueError, StopIteration)


def clip_facts(path: Path) -> tuple[float, float, str]:
    """(frame rate, duration in seconds, codec name) of a video file; DataMismatch if none."""
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            rate = float(stream.average_rate or stream.guessed_rate or 0)
            duration = _duration(container, stream)
            name = stream.codec_context.name
    except (*_VIDEO_ERRORS, IndexError) as exc:
        raise _unreadable(path, exc) from None
    if rate <= 0 or duration <= 0:
        raise DataMismatch(
            f"The video {path.name!r} declares no frame rate or duration.",
            hint="Re-encode it into an .mp4 (e.g. with ffmpeg -i IN -c:v libx264 OUT.mp4).",
        )
    return rate, duration, name


class FrameSource:
    """Frames of one file from `offset` seconds on, looping, as RGB images."""

    def __init__(self, path: Path, *, offset: float = 0.0, hardware: bool = True) -> None:
        self.path = Path(path)
        self.rate, self.duration, codec = clip_facts(self.path)
        self.offset = offset % self.duration
        found = _hardware_decoder(self.path, codec) if hardware else None
        self.decoder: str = found or codec
        self.hardware = found is not None
        self._frames = self._loop()

    def next_image(self) -> Image.Image:
        """The next frame (decoded now, on this thread)."""
        return next(self._frames)

    def _loop(self) -> Iterator[Image.Image]:
        start = self.offset
        while True:
            shown = 0
            for image in self._pass(start):
                shown += 1
                yield image
            if not shown:
                raise DataMismatch(f"The video {self.path.name!r} has no decodable frames.")
            start = 0.0

    def _pass(self, start: float) -> Iterator[Image.Image]:
        try:
            with av.open(str(self.path)) as container:
                stream = container.streams.video[0]
                context = _context(stream, self.decoder)
                if start > 0:
                    container.seek(
                        int(start / (stream.time_base or 1)), stream=stream, backward=True
                    )
                for packet in container.demux(stream):
                    for frame in context.decode(packet):
                        if frame.time is None or frame.time >= start - 1e-6:
                            yield frame.to_image()
        except _VIDEO_ERRORS as exc:
            raise _unreadable(self.path, exc) from None


def _context(stream: VideoStream, decoder: str) -> VideoCodecContext:
    if decoder == stream.codec_context.name:
        stream.codec_context.thread_count = 1
        return stream.codec_context
    context = cast(VideoCodecContext, av.CodecContext.create(decoder, "r"))
    context.extradata = stream.codec_context.extradata
    return context


def _hardware_decoder(path: Path, codec: str) -> str | None:
    """`<codec>_cuvid` if FFmpeg has it and it decodes this file's first frame here."""
    name = f"{codec}_cuvid"
    if name not in av.codecs_available:
        return None
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            context = _context(stream, name)
            for packet in container.demux(stream):
                if context.decode(packet):
                    return name
    except (av.FFmpegError, OSError, ValueError) as exc:
        log.info("hardware decoder %s unusable here: %s", name, first_line(exc))
    return None


def _duration(container: av.container.InputContainer, stream: VideoStream) -> float:
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    return container.duration / av.time_base if container.duration else 0.0


def _unreadable(path: Path, exc: BaseException) -> DataMismatch:
    if isinstance(exc, FileNotFoundError):
        return DataMismatch(
            f"The video {path.name!r} does not exist.", hint="Check the file name and folder."
        )
    reason = first_line(exc).replace(str(path), path.name)  # no server paths in messages
    return DataMismatch(
        f"Cannot decode the video {path.name!r}: {reason}",
        hint="Give a video file FFmpeg reads (.mp4, .mkv, .avi) with a video stream.",
    )
