"""What kind of input a model takes, read from its declared inputs, as evidence for a task.

In the order asked, the first that fits names the model's input kind:

- image: a float input of rank 4 with 1, 3 or 4 channels on axis 1 (NCHW) or axis 3 (NHWC),
  unless its shape is that of audio frames ([N, 1, T, 257]);
- tokens: an integer input of rank 2 named like ids, tokens or a mask (input_ids);
- audio: a float input of rank 2 or 3 named like audio (waveform, input_values, speech, fbank,
  mel...), or whose declared shape shows audio (optistudio.core.data.builtin.audio_inputs: a
  row of at least 4,000 samples, [N, L], [N, L, 1] or [N, 1, L]; frames of STFT bins such as
  257, or [N, 80|128, T] mel frames);
- features: a float input of rank 2 ([N, F]); sequence: a float input of rank 3.

A task declares the kinds its models take (`EvaluatorInfo.input_kinds`): a model whose kind is
one of them gets WEAK support; one whose kind is image, tokens or audio but not one of them gets
WEAK evidence against. Features, sequences and unknown inputs say nothing either way.
"""

from __future__ import annotations

from typing import Literal

from optistudio.core.data.builtin.audio_inputs import declared_audio
from optistudio.core.model.info import TensorSpec
from optistudio.core.numerics.evaluators.base import ModelFacts
from optistudio.core.numerics.evaluators.evidence import WEAK, Evidence
from optistudio.core.numerics.evaluators.outputs import FLOAT_DTYPES, shape_text, size

InputKind = Literal["image", "tokens", "audio", "features", "sequence", "unknown"]
ASKED: tuple[InputKind, ...] = ("image", "tokens", "audio", "features", "sequence")
TELLING = frozenset({"image", "tokens", "audio"})
CHANNELS = frozenset({1, 3, 4})
TOKEN_WORDS = ("ids", "token", "mask")
AUDIO_WORDS = ("audio", "wav", "pcm", "waveform", "input_values", "speech", "fbank", "mel")
KIND_WORDS = {
    "image": "an image batch",
    "tokens": "token ids",
    "audio": "audio",
    "features": "a feature vector per sample",
    "sequence": "a sequence of vectors per sample",
}


def input_kind(facts: ModelFacts) -> tuple[InputKind, str]:
    """The model's input kind and the input that shows it ('' when unknown)."""
    for kind in ASKED:
        for name, shape in facts.input_shapes.items():
            if _is(kind, name, shape, facts.input_dtypes.get(name, "")):
                return kind, name
    return "unknown", ""


def input_evidence(facts: ModelFacts, kinds: tuple[str, ...]) -> list[Evidence]:
    """What the model's input kind says for a task whose models take `kinds` (docstring)."""
    kind, name = input_kind(facts)
    if not kinds or kind not in KIND_WORDS:
        return []
    letters = {"image": "NCHW", "tokens": "NT"}.get(kind, "N")
    shown = f"{name} {shape_text(facts.input_shapes[name], letters)}: {KIND_WORDS[kind]}"
    if kind in kinds:
        return [Evidence(kind="input", weight=WEAK, text=shown)]
    if kind in TELLING:
        return [
            Evidence(kind="input", weight=-WEAK, text=f"{shown}, not what this task's models take")
        ]
    return []


def _is(kind: str, name: str, shape: list, dtype: str) -> bool:
    floating = dtype in FLOAT_DTYPES or not dtype
    lowered = name.lower()
    if kind == "image":
        channels = bool({size(shape[1]), size(shape[3])} & CHANNELS) if len(shape) == 4 else False
        return floating and channels and not _shows_audio(name, shape)
    if kind == "tokens":
        integer = dtype.startswith(("int", "uint"))
        return integer and len(shape) == 2 and any(word in lowered for word in TOKEN_WORDS)
    if kind == "audio":
        named = len(shape) in (2, 3) and any(word in lowered for word in AUDIO_WORDS)
        return floating and (named or _shows_audio(name, shape))
    return floating and len(shape) == (2 if kind == "features" else 3)


def _shows_audio(name: str, shape: list) -> bool:
    """Whether a float input's declared shape is that of audio (a waveform or frames)."""
    spec = TensorSpec(name=name, dtype="float32", shape=list(shape))
    return declared_audio(spec) is not None


def fixed_image_size(facts: ModelFacts) -> tuple[int, int] | None:
    """The image input's height and width where the graph fixes both (NCHW or NHWC); None
    for another input kind or a dynamic size."""
    kind, name = input_kind(facts)
    if kind != "image":
        return None
    shape = [size(dim) for dim in facts.input_shapes[name]]
    height, width = shape[2:4] if shape[1] in CHANNELS else shape[1:3]
    return (height, width) if height and width else None
