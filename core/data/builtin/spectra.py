"""Frames of features from a waveform, in numpy: STFT magnitudes and log-mel energies.

For a signal x, frame t covers x[t h, t h + n) for a hop h and a window of n samples, weighted
by the periodic Hann window w[k] = 1/2 - 1/2 cos(2 pi k / n); its spectrum X_t = rfft(w x_t)
has n/2 + 1 bins, bin k at frequency k rate / n. T frames need (T - 1) h + n samples.

- STFT magnitude frames: |X_t|, with n = 2 (bins - 1) and h = n / 4 (75 % overlap, the usual
  default), for a model that takes n/2 + 1 bins (257: n = 512).
- log-mel frames: ln(max(M |X_t|^2, FLOOR)), the natural log of the power in each of the mel
  bands (Kaldi's and torchaudio's fbank convention, before any per-feature normalisation), with
  a 25 ms window and a 10 ms hop at the rate (n = 400, h = 160 at 16 kHz). M holds one
  triangular filter per band on the HTK mel scale m(f) = 2595 log10(1 + f / 700): bands + 2
  points equally spaced in m from 0 Hz to rate / 2, filter j rising from point j to 1 at point
  j + 1 and falling to 0 at point j + 2.
"""

from __future__ import annotations

import numpy as np

FLOOR = 1e-10
MEL_WINDOW_S = 0.025
MEL_HOP_S = 0.010


def stft_geometry(bins: int) -> tuple[int, int]:
    """(window n, hop h) of STFT magnitude frames of `bins` bins."""
    window = 2 * (bins - 1)
    return window, max(1, window // 4)


def mel_geometry(rate: int) -> tuple[int, int]:
    """(window n, hop h) of log-mel frames at `rate`."""
    return round(MEL_WINDOW_S * rate), round(MEL_HOP_S * rate)


def samples_for(frames: int, window: int, hop: int) -> int:
    """The samples `frames` frames of `window` every `hop` cover."""
    return (max(1, frames) - 1) * hop + window


def stft_magnitude(signal: np.ndarray, window: int, hop: int) -> np.ndarray:
    """|X_t| of every whole frame: [frames, window // 2 + 1]."""
    count = 1 + (len(signal) - window) // hop
    starts = hop * np.arange(count)[:, None]
    framed = signal[starts + np.arange(window)[None, :]]
    hann = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(window) / window)
    return np.abs(np.fft.rfft(framed * hann, axis=1))


def mel_filterbank(bands: int, window: int, rate: int) -> np.ndarray:
    """M: [bands, window // 2 + 1], the triangular filters of the module docstring."""
    top = 2595 * np.log10(1 + (rate / 2) / 700)
    points = 700 * (10 ** (np.linspace(0, top, bands + 2) / 2595) - 1)
    frequencies = np.arange(window // 2 + 1) * rate / window
    low, mid, high = points[:-2, None], points[1:-1, None], points[2:, None]
    rising = (frequencies - low) / np.maximum(mid - low, 1e-9)
    falling = (high - frequencies) / np.maximum(high - mid, 1e-9)
    return np.maximum(0.0, np.minimum(rising, falling))


def log_mel(signal: np.ndarray, bands: int, rate: int) -> np.ndarray:
    """ln(max(M |X_t|^2, FLOOR)): [frames, bands]."""
    window, hop = mel_geometry(rate)
    power = stft_magnitude(signal, window, hop) ** 2
    return np.log(np.maximum(power @ mel_filterbank(bands, window, rate).T, FLOOR))
