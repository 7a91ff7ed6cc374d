"""Which float inputs hold audio, in what form (samples, log-mel or STFT frames) and at what rate.

Read from the input's name, its declared and resolved shape (batch first) and the model:

- frames: two axes besides the batch (and, at rank 4, one channel of 1: [N, 1, T, 257]), one of
  them a fixed number of frequency bins. An odd count n_fft/2 + 1 of an STFT (STFT_BINS: 129,
  161, 201, 257, 513, 1025) marks STFT magnitude frames on either axis; 80 or 128 (MEL_BINS) on
  axis 1 of a rank-3 input whose time axis is dynamic ([N, 80, T], NeMo's layout; a fixed
  [N, 80, 8400] is as often a detector's class scores) marks log-mel frames, and so does a
  mel band count (BANDS_LAST: 40, 64, 80, 96, 120, 128) last after a fixed time axis of at
  least CLIP_FRAMES (3 s of 10 ms frames: DNSMOS P.808's [N, 900, 120]). An input named
  like features (fbank, mel, spec, stft, input_features; input_values with two axes, as AST's
  [N, 1024, 128]) is frames whatever its fixed count: on a mel count where one axis has it,
  else on the smaller fixed axis, STFT magnitude for an odd count, log-mel for an even one;
- a waveform: one long axis of samples besides the batch (and a channel of 1: [N, L], [N, L, 1],
  [N, 1, L]) of at least MIN_SAMPLES (a quarter second at 16 kHz: shorter rows are more often a
  feature vector), or of any length when the input is named like audio (audio, wav, pcm,
  waveform, input_values, speech) or the model takes a sample-rate input beside it (`sr`).

The rate, first that speaks: the model's value for a sample-rate input (the user's, else
RATE, as the input profile proposes); a number in the model's metadata under a rate key
(sample_rate, sampling_rate, sr...); the input's name (audio_16k, wav_22050); for a waveform,
the length: the first of PREFERRED_RATES (16, 22.05, 8 kHz) at which the row is within
TOLERANCE (1 %) of a whole number of half seconds (144,160 samples: 9.01 s at 16 kHz; 43,844:
1.99 s at 22.05 kHz; 28,000: 3.5 s at 8 kHz). A length cannot tell apart rates a factor of two
apart, so the order decides there: speech first, then music, then telephony. 44.1 kHz is never
implied, only stated: a whole number of half seconds at 44.1 kHz is one at 22.05 kHz too (43,844
is also 0.99 s at 44.1 kHz), and 22.05 kHz is what music models of such windows more often
take (basic-pitch's 43,844). Else RATE, the rate of most speech models.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import onnx

from optistudio.core.model.info import Dim, TensorSpec

AudioForm = Literal["waveform", "log-mel", "stft"]
RATE = 16_000
PREFERRED_RATES = (16_000, 22_050, 8_000)
TOLERANCE = 0.01
MIN_SAMPLES = 4_000
STFT_BINS = frozenset({129, 161, 201, 257, 513, 1025})
MEL_BINS = frozenset({80, 128})
BANDS_LAST = frozenset({40, 64, 80, 96, 120, 128})
CLIP_FRAMES = 300
FLOATS = ("float16", "float32", "float64")
WAVE_WORDS = ("audio", "wav", "pcm", "waveform", "input_values", "speech")
FEATURE_WORDS = ("fbank", "mel", "spec", "stft", "input_features")
RATE_NAMES = ("sr", "sample_rate", "sampling_rate", "samplerate")
RATE_KEY = re.compile(r"(^|_)(sr|rate|sample_?rate|sampling_?rate|samplerate)$")
NAMED_RATE = re.compile(
    r"(?<![0-9])(8|16|22|24|32|44|48)(?:\.\d+)?k(?:hz)?(?![a-z0-9])"
    r"|(?<![0-9])(8000|16000|22050|24000|32000|44100|48000)(?![0-9])"
)
KHZ = {8: 8_000, 16: 16_000, 22: 22_050, 24: 24_000, 32: 32_000, 44: 44_100, 48: 48_000}
RATE_RANGE = (4_000, 192_000)


@dataclass(frozen=True)
class AudioInput:
    """How one audio input is fed: its form, the rate and why, and for frames the bins."""

    form: AudioForm
    rate: int
    rate_why: str
    bins: int = 0
    """Mel or STFT bins of a frame; 0 for a waveform."""
    bins_last: bool = True
    """Whether the bins axis follows the time axis ([N, T, 257]) or precedes it ([N, 80, T])."""


def audio_input(
    spec: TensorSpec,
    shape: tuple[int, ...],
    *,
    model: onnx.ModelProto | None = None,
    rate_input: tuple[int, str] | None = None,
) -> AudioInput | None:
    """The audio `spec` holds at its resolved `shape`, or None (module docstring);
    `rate_input`: the model's sample-rate input's value and why, where it has one."""
    if spec.dtype not in FLOATS or len(shape) not in (2, 3, 4) or len(spec.shape) != len(shape):
        return None
    stated = rate_input or stated_rate(spec.name, model)
    frames = _frames(spec, shape)
    if frames is not None:
        rate, why = stated or (RATE, "the rate of most speech models")
        return AudioInput(frames[0], rate, why, frames[1], frames[2])
    length = _waveform_length(spec, shape, rate_input is not None)
    if length is None:
        return None
    rate, why = stated or implied_rate(length)
    return AudioInput("waveform", rate, why)


def declared_audio(spec: TensorSpec) -> AudioForm | None:
    """The audio form an input's declared shape shows, its dynamic sizes unknown; else None
    (a dynamic row of samples is a waveform only by its name or a rate input beside it)."""
    shape = tuple(dim if isinstance(dim, int) else 0 for dim in spec.shape)
    found = audio_input(spec, shape, rate_input=None)
    return found.form if found is not None else None


def is_frames(spec: TensorSpec, shape: tuple[int, ...]) -> bool:
    """Whether the input holds frames of features (bins x time), not a waveform or an image."""
    return spec.dtype in FLOATS and len(shape) in (3, 4) and _frames(spec, shape) is not None


def implied_rate(samples: int) -> tuple[int, str]:
    """The rate a waveform's length implies, and why (module docstring)."""
    for rate in PREFERRED_RATES:
        seconds = samples / rate
        whole = round(seconds * 2) / 2
        if whole >= 0.5 and abs(seconds - whole) <= TOLERANCE * whole:
            return rate, f"{samples} samples are {seconds:.2f} s at {_khz(rate)}"
    rates = ", ".join(_khz(rate) for rate in PREFERRED_RATES)
    why = f"{samples} samples are no whole number of half seconds at {rates}"
    return RATE, f"the rate of most speech models; {why}"


def stated_rate(name: str, model: onnx.ModelProto | None) -> tuple[int, str] | None:
    """The rate the model's metadata or the input's name states, and where; else None."""
    for prop in model.metadata_props if model is not None else ():
        found = _number(prop.value) if RATE_KEY.search(prop.key.lower()) else None
        if found is not None:
            return found, f"the model's metadata '{prop.key}'"
    match = NAMED_RATE.search(name.lower())
    if match is None:
        return None
    rate = KHZ[int(match.group(1))] if match.group(1) else int(match.group(2))
    return rate, f"the input's name {name!r}"


def rate_input(specs: list[TensorSpec], values: Mapping[str, object]) -> tuple[int, str] | None:
    """The value of the model's sample-rate input (an integer named sr, sample_rate...): the
    given one, else RATE; None when the model takes none."""
    for spec in specs:
        if spec.name.lower() in RATE_NAMES and spec.dtype not in FLOATS:
            given = _number(str(values.get(spec.name, "")))
            if given is not None:
                return given, f"the value given to input {spec.name!r}"
            return RATE, f"the value fed to the model's rate input {spec.name!r}"
    return None


def _frames(spec: TensorSpec, shape: tuple[int, ...]) -> tuple[AudioForm, int, bool] | None:
    """(form, bins, bins last) for frames of features, else None."""
    if len(shape) not in (3, 4) or (len(shape) == 4 and not spec.shape[1] == shape[1] == 1):
        return None
    last = len(shape) - 1
    fixed = {axis: _fixed(spec.shape[axis], shape[axis]) for axis in (last - 1, last)}
    found = {axis: bins for axis, bins in fixed.items() if bins is not None and bins > 1}
    named = _named_features(spec.name, shape)
    for axis, bins in found.items():
        if bins in STFT_BINS:
            return "stft", bins, axis == last
    for axis, bins in found.items():
        mel = bins in MEL_BINS and (named or (len(shape) == 3 and axis == 1 and fixed[2] is None))
        if mel:
            return "log-mel", bins, axis == last
    bands = fixed[last]
    if (
        len(shape) == 3
        and bands is not None
        and bands in BANDS_LAST
        and (fixed[1] or 0) >= CLIP_FRAMES
    ):
        return "log-mel", bands, True
    if not named or not found:
        return None
    axis = min(found, key=lambda key: found[key])
    bins = found[axis]
    return ("stft" if bins % 2 else "log-mel"), bins, axis == last


def _named_features(name: str, shape: tuple[int, ...]) -> bool:
    """Named like features (fbank, mel...), or HF's input_values with two axes (AST's frames)."""
    lowered = name.lower()
    two_axes = len([size for size in shape[1:] if size != 1]) == 2
    return any(word in lowered for word in FEATURE_WORDS) or (
        two_axes and "input_values" in lowered
    )


def _waveform_length(spec: TensorSpec, shape: tuple[int, ...], rate_beside: bool) -> int | None:
    """The samples per row of a waveform input, else None."""
    long = [size for size in shape[1:] if size != 1]
    if len(shape) == 4 or len(long) != 1:
        return None
    name = spec.name.lower()
    if any(word in name for word in FEATURE_WORDS):
        return None
    if rate_beside or any(word in name for word in WAVE_WORDS) or long[0] >= MIN_SAMPLES:
        return long[0]
    return None


def _fixed(declared: Dim, resolved: int) -> int | None:
    """A size the graph fixes (a dynamic axis resolved to 128 by convention is no bin count)."""
    return resolved if isinstance(declared, int) and declared == resolved else None


def _number(text: str) -> int | None:
    found = re.search(r"\d+(?:\.\d+)?", text)
    value = float(found.group()) if found else 0.0
    return int(value) if RATE_RANGE[0] <= value <= RATE_RANGE[1] else None


def _khz(rate: int) -> str:
    return f"{rate / 1000:g} kHz"
