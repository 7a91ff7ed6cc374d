"""How a video run is paced, buffered and batched, validated once."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.data.images import ImagePreprocessing

DropPolicy = Literal["drop_oldest", "skip_to_newest"]


class VideoSettings(BaseModel):
    """Streams, pacing and the batching policy of one video run."""

    model_config = ConfigDict(extra="forbid")

    streams: int = Field(default=1, ge=1, le=256, description="Streams played at once.")
    seconds: float = Field(default=5.0, gt=0, le=3600, description="How long each stream plays.")
    realtime: bool = Field(
        default=False,
        description="Play each stream at its frame rate (frames arrive as from a camera and "
        "are dropped when inference falls behind); off: as fast as possible, never dropping.",
    )
    drop_policy: DropPolicy = Field(
        default="drop_oldest",
        description="When a real-time stream's buffer is full: drop the oldest buffered frame, "
        "or drop every buffered frame and skip to the newest.",
    )
    buffer_frames: int = Field(
        default=2, ge=1, le=256, description="Decoded frames a stream holds before it drops."
    )
    in_flight: int = Field(
        default=2,
        ge=1,
        le=64,
        description="Frames of one stream inside the batching pipeline at once; more wait in "
        "the stream's buffer.",
    )
    hardware_decode: bool = Field(
        default=True, description="Use a hardware decoder (e.g. h264_cuvid) when one works here."
    )
    batching: BatchingSettings = Field(default_factory=BatchingSettings)
    preprocessing: ImagePreprocessing = Field(default_factory=ImagePreprocessing)
