"""Built-in speech-like audio (`audio.speech_like`) in the form an audio input takes.

A waveform gets the clip's samples at the input's rate, row by row ([L], [L, 1] or [1, L] per
sample); a row shorter than a second (a streaming model's 512-sample window) is cut around the
loudest sample of a one-second clip, so it holds voice. Frames get the clip made into features (`spectra`): as many samples as the frames
cover, then STFT magnitudes or log-mel energies, laid out bins-last ([T, 257], [1, T, 257]) or
bins-first ([80, T]) as the input declares (`AudioInput.bins_last`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from optistudio.core.data.builtin.audio import speech_like
from optistudio.core.data.builtin.audio_inputs import AudioInput
from optistudio.core.data.builtin.spectra import (
    log_mel,
    mel_geometry,
    samples_for,
    stft_geometry,
    stft_magnitude,
)

WHAT = "built-in speech-like audio"
"""How every audio input's samples are named, in the run's data line and notes."""
MADE = "synthetic voiced syllables; no installed package ships recorded speech"


def audio_filler_parts(
    audio: AudioInput, seed: int
) -> tuple[str, Callable[[int, tuple[int, ...]], np.ndarray]]:
    """What the input's samples are, in words, and `make(index, sample shape)`."""

    def make(index: int, shape: tuple[int, ...]) -> np.ndarray:
        return audio_sample(audio, index, shape, seed)

    return described(audio), make


def described(audio: AudioInput) -> str:
    """'clips of built-in speech-like audio (...) at 16 kHz (why)'."""
    rate = f"at {audio.rate / 1000:g} kHz ({audio.rate_why})"
    if audio.form == "waveform":
        return f"clips of {WHAT} ({MADE}), samples {rate}"
    if audio.form == "stft":
        window, hop = stft_geometry(audio.bins)
        frames = f"STFT magnitude frames, {audio.bins} bins of {window}-sample windows every {hop}"
    else:
        frames = f"log-mel frames, {audio.bins} mel bands of 25 ms windows every 10 ms"
    return f"clips of {WHAT} ({MADE}) as {frames}, {rate}"


def audio_sample(audio: AudioInput, index: int, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Sample `index` of the input, shaped `shape` (one sample, no batch axis)."""
    if audio.form == "waveform":
        return _voiced_row(audio, index, int(np.prod(shape)), seed).reshape(shape)
    bins_axis = _bins_axis(shape, audio)
    frames = int(np.prod(shape)) // audio.bins
    if audio.form == "stft":
        window, hop = stft_geometry(audio.bins)
        clip = speech_like(index, samples_for(frames, window, hop), seed, rate=audio.rate)
        table = stft_magnitude(clip, window, hop)
    else:
        window, hop = mel_geometry(audio.rate)
        clip = speech_like(index, samples_for(frames, window, hop), seed, rate=audio.rate)
        table = log_mel(clip, audio.bins, audio.rate)
    time_axis = next((a for a, size in enumerate(shape) if size != 1 and a != bins_axis), None)
    ordered = table if time_axis is None or time_axis < bins_axis else table.T
    return ordered.reshape(shape).astype(np.float32)


def _voiced_row(audio: AudioInput, index: int, samples: int, seed: int) -> np.ndarray:
    """`samples` of clip `index`; a row shorter than a second is cut from a second of it around
    its loudest sample, so that it holds voice, not the pause a clip may open with."""
    if samples >= audio.rate:
        return speech_like(index, samples, seed, rate=audio.rate)
    clip = speech_like(index, audio.rate, seed, rate=audio.rate)
    start = min(max(0, int(np.argmax(np.abs(clip))) - samples // 2), audio.rate - samples)
    return clip[start : start + samples]


def _bins_axis(shape: tuple[int, ...], audio: AudioInput) -> int:
    """The axis of `shape` that holds the bins (the last of that size when bins come last)."""
    axes = [axis for axis, size in enumerate(shape) if size == audio.bins]
    if not axes:
        raise ValueError(f"no axis of {list(shape)} holds the {audio.bins} bins")
    return axes[-1] if audio.bins_last else axes[0]
