"""Which built-in set suits each model input, read from its declared spec, the graph and the task.

In this order, the first that fits names an input's set:

- an input the user gave a value or an array, an attention mask or token type ids: what
  synthesised inputs already hold (theirs; ones, zeros);
- a sample rate (an integer input named sr, sample_rate...): the rate the audio is fed at;
- frames of audio features (`audio_inputs`: STFT bins such as 257 on an axis, [N, 80|128, T]
  mel frames, or an input named like fbank, mel, spec): speech-like clips made into the
  frames, before images, as [N, 1, T, 257] has the one channel of a grey image;
- an image (rank 4, a fixed 1 or 3 channels on axis 1, NCHW, or axis 3, NHWC; float or uint8):
  rendered text lines when the task is ctc_text or the image is a line (height <= 96 and width
  >= 3 x height), rendered text pages when the task is detection_map (a text detector's
  probability map), else crops of photographs;
- bytes (an integer input of rank 2 named like bytes, or whose embedding table has 256 or 257
  rows): windows of real files;
- position ids (an integer input of rank 2 named like positions): 0, 1, ... along the row;
- token ids (an integer input of rank 2 named like ids or tokens, or whatever its name when it
  indexes an embedding table of more than 257 rows): real sentences, hashed;
- a waveform (`audio_inputs`: a float row of samples named like audio, or of at least 4,000
  samples, or beside a sample-rate input; [N, L], [N, L, 1], [N, 1, L]): speech-like clips at
  the rate the model states or the length implies;
- a recurrent state (a float input named state, h, c, h0, c0...): zeros, the state a stream
  starts from.

Any other input (features, a scale factor...) has no built-in set: the run then falls back to
random inputs (`NO_SET`), and says which input needs data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import onnx

from optistudio.core.data.builtin.audio_inputs import (
    RATE_NAMES,
    AudioInput,
    audio_input,
    is_frames,
)
from optistudio.core.data.builtin.tokens import vocab_size
from optistudio.core.model.info import Dim, TensorSpec

SampleSet = Literal[
    "photos",
    "text lines",
    "text pages",
    "token ids",
    "positions",
    "audio",
    "bytes",
    "rate",
    "state",
    "given",
]
IMAGE_CHANNELS = (1, 3)
LINE_HEIGHT = 96
LINE_ASPECT = 3
TOKEN_WORDS = ("ids", "token")
GIVEN_WORDS = ("mask", "token_type")
STATE_WORDS = frozenset({"state", "h", "c", "h0", "c0", "hx", "cx"})
BYTE_VOCABS = (256, 257)
LINE_TASKS = frozenset({"ctc_text"})
PAGE_TASKS = frozenset({"detection_map"})
INTEGERS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
FLOATS = ("float16", "float32", "float64")


@dataclass(frozen=True)
class InputSet:
    """The built-in set one input gets, and for an image its layout."""

    name: str
    kind: SampleSet
    layout: Literal["NCHW", "NHWC"] | None = None
    audio: AudioInput | None = None
    """For audio (and a sample-rate input): the form, the rate and why."""


def input_set(
    spec: TensorSpec,
    shape: tuple[int, ...],
    *,
    model: onnx.ModelProto | None,
    task: str | None,
    given: bool = False,
    rate_input: tuple[int, str] | None = None,
) -> InputSet | None:
    """The set for one input at its resolved `shape` (module docstring); None: none fits.
    `rate_input`: what the model's sample-rate input is fed (`audio_inputs.rate_input`)."""
    if given or any(word in spec.name.lower() for word in GIVEN_WORDS):
        return InputSet(spec.name, "given")
    if rate_input is not None and spec.name.lower() in RATE_NAMES and spec.dtype in INTEGERS:
        return InputSet(spec.name, "rate", audio=AudioInput("waveform", *rate_input))
    if is_frames(spec, shape):
        return _audio_set(spec, shape, model, rate_input)
    layout = image_layout(spec, shape)
    if layout is not None:
        return InputSet(spec.name, _image_set(shape, layout, task), layout)
    return _sequence_set(spec, shape, model) or _audio_set(spec, shape, model, rate_input)


def image_layout(spec: TensorSpec, shape: tuple[int, ...]) -> Literal["NCHW", "NHWC"] | None:
    """NCHW or NHWC for an image input (float or uint8, rank 4, 1 or 3 channels), else None."""
    if len(shape) != 4 or spec.dtype not in (*FLOATS, "uint8"):
        return None
    if _channels(spec.shape[1], shape[1]):
        return "NCHW"
    if _channels(spec.shape[3], shape[3]):
        return "NHWC"
    return None


def _channels(declared: Dim, resolved: int) -> bool:
    """A fixed channel count of 1 or 3 (declared; a dynamic axis never counts as channels)."""
    return isinstance(declared, int) and declared == resolved and resolved in IMAGE_CHANNELS


def _image_set(shape: tuple[int, ...], layout: str, task: str | None) -> SampleSet:
    height, width = (shape[2], shape[3]) if layout == "NCHW" else (shape[1], shape[2])
    if task in LINE_TASKS or (height <= LINE_HEIGHT and width >= LINE_ASPECT * height):
        return "text lines"
    return "text pages" if task in PAGE_TASKS else "photos"


def _sequence_set(
    spec: TensorSpec, shape: tuple[int, ...], model: onnx.ModelProto | None
) -> InputSet | None:
    name = spec.name.lower()
    if spec.dtype in INTEGERS and len(shape) == 2:
        vocab = vocab_size(model, spec.name) if model is not None else None
        if "byte" in name or vocab in BYTE_VOCABS:
            return InputSet(spec.name, "bytes")
        if "position" in name:
            return InputSet(spec.name, "positions")
        if any(word in name for word in TOKEN_WORDS) or (vocab or 0) > max(BYTE_VOCABS):
            return InputSet(spec.name, "token ids")
    return None


def _audio_set(
    spec: TensorSpec,
    shape: tuple[int, ...],
    model: onnx.ModelProto | None,
    rate_input: tuple[int, str] | None,
) -> InputSet | None:
    """Zeros for a recurrent state, speech-like audio for a waveform or frames, else None."""
    words = set(re.split(r"[^a-z0-9]+", spec.name.lower()))
    if spec.dtype in FLOATS and (words & STATE_WORDS):
        return InputSet(spec.name, "state")
    found = audio_input(spec, shape, model=model, rate_input=rate_input)
    return InputSet(spec.name, "audio", audio=found) if found is not None else None
