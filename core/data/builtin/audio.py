"""Speech-like audio, synthesised: no installed package ships recorded speech.

(scipy's and scikit-learn's data folders hold test tones and tables, not voices.) So these
clips are synthetic, made to have the structure of speech rather than of noise: syllables of
120-300 ms, some opened by a consonant burst, separated by pauses, each a voiced vowel:

- a glottal pulse train at a fundamental f0(t) (a speaker's 90-220 Hz, drifting +-15 % over the
  syllable), smoothed twice by a one-pole low-pass so its harmonics fall about 12 dB/octave;
- through three formant resonators in cascade, one vowel's F1-F3 (a, e, i, o, u of an adult
  voice), each the two-pole filter y[n] = (1 - r) x[n] + 2 r cos(theta) y[n-1] - r^2 y[n-2] with
  r = exp(-pi B / fs), theta = 2 pi F / fs, bandwidth B of 80-120 Hz;
- under a raised-cosine envelope, at a loudness of 0.5-1 of the clip's peak; a burst is 20-60 ms
  of differenced white noise at 0.1-0.3.

The clip is scaled to a peak of 0.5 with a noise floor 50 dB under it, at RATE (16 kHz, the rate
of nearly every speech model; no model says its own). Clip i depends only on (seed, i).
"""

from __future__ import annotations

import numpy as np

RATE = 16_000
VOWELS = {
    "a": (730, 1090, 2440),
    "e": (530, 1840, 2480),
    "i": (270, 2290, 3010),
    "o": (570, 840, 2410),
    "u": (300, 870, 2240),
}
BANDWIDTHS = (80, 100, 120)
PEAK = 0.5
FLOOR_DB = -50.0


def speech_like(index: int, samples: int, seed: int = 0, rate: int = RATE) -> np.ndarray:
    """Clip `index`: `samples` float32 values in [-PEAK, PEAK] (module docstring)."""
    rng = np.random.default_rng([seed, index, 4])
    f0 = rng.uniform(90, 220)
    clip = np.zeros(samples)
    at = int(rng.integers(0, max(1, rate // 10)))
    while at < samples:
        syllable = _syllable(rng, f0, rate)
        end = min(samples, at + len(syllable))
        clip[at:end] += syllable[: end - at]
        at = end + int(rng.uniform(0.03, 0.25) * rate)
    peak = float(np.max(np.abs(clip))) or 1.0
    clip *= PEAK / peak
    clip += rng.standard_normal(samples) * PEAK * 10 ** (FLOOR_DB / 20)
    return clip.astype(np.float32)


def _syllable(rng: np.random.Generator, f0: float, rate: int) -> np.ndarray:
    length = int(rng.uniform(0.12, 0.30) * rate)
    voiced = _vowel(rng, f0, length, rate)
    voiced *= rng.uniform(0.5, 1.0) / (float(np.max(np.abs(voiced))) or 1.0)
    if rng.random() < 0.6:
        burst = np.diff(rng.standard_normal(int(rng.uniform(0.02, 0.06) * rate) + 1))
        burst *= rng.uniform(0.1, 0.3) / (float(np.max(np.abs(burst))) or 1.0)
        voiced = np.concatenate([burst * np.hanning(len(burst)), voiced])
    return voiced


def _vowel(rng: np.random.Generator, f0: float, length: int, rate: int) -> np.ndarray:
    contour = f0 * (1 + rng.uniform(-0.15, 0.15) * np.linspace(-1, 1, length))
    phase = np.cumsum(contour / rate)
    pulses = np.diff(np.floor(phase), prepend=0.0)
    source = lfilter([1.0], [1.0, -0.9], lfilter([1.0], [1.0, -0.9], pulses))
    formants = VOWELS[str(rng.choice(list(VOWELS)))]
    for frequency, bandwidth in zip(formants, BANDWIDTHS, strict=True):
        source = _resonate(source, frequency, bandwidth, rate)
    envelope = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(length) / max(1, length - 1))
    return source * envelope


def _resonate(signal: np.ndarray, frequency: float, bandwidth: float, rate: int) -> np.ndarray:
    r = np.exp(-np.pi * bandwidth / rate)
    theta = 2 * np.pi * frequency / rate
    return lfilter([1 - r], [1.0, -2 * r * np.cos(theta), r * r], signal)


def lfilter(b: list[float], a: list[float], x: np.ndarray) -> np.ndarray:
    """scipy.signal.lfilter, imported when a clip is made: the import takes 2-3 s on 2 cores,
    which every CLI command and worker paid when it was at the top of this module."""
    from scipy.signal import lfilter as scipy_lfilter

    return np.asarray(scipy_lfilter(b, a, x))
