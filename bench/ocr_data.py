"""Rendered text lines for the PP-OCRv4 recognizer, made in code, with the strings drawn.

The detector's rendered pages stay in bench/reference_models.py (`rapidocr_det`, its word list
`OCR_WORDS`); this module adds the recognizer and its data:

  rapidocr_rec(folder, lines)  PP-OCRv4 text recognizer from rapidocr-onnxruntime's models/
                               folder, `lines` rendered text lines as an .npz (input `x`,
                               [lines, 3, 48, 320]) and their strings as a .json list (labels).

A line is 1-4 words of `OCR_WORDS` in Pillow's bundled font at 22-39 px, dark ink on a light
background, cropped to the text with a few pixels of margin, then prepared as rapidocr's
TextRecognizer prepares a detected line: BGR (it reads images with OpenCV), resized to height 48
keeping the aspect ratio (width at most 320), scaled to (x / 255 - 0.5) / 0.5, CHW, and padded
with zeros to 320 on the right. Words are dropped from the end until the line fits in 320 pixels
at height 48, so no line is squeezed. Cached: a second call with the same count reuses the files.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from reference_models import OCR_WORDS, SEED  # noqa: E402
from zoo_models import _rapidocr_file  # noqa: E402

REC_FILE = "ch_PP-OCRv4_rec_infer.onnx"
LINE_HEIGHT = 48
LINE_WIDTH = 320
FONT_SIZES = (22, 40)
MARGIN = (2, 8)


def _fits(font, text: str) -> bool:
    """Whether `text` in `font` stays within 320 px once scaled to a height of 48."""
    left, top, right, bottom = font.getbbox(text)
    height = bottom - top + 2 * MARGIN[1]
    return math.ceil(LINE_HEIGHT * (right - left + 2 * MARGIN[1]) / height) <= LINE_WIDTH


def text_line(rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """One rendered line as uint8 HWC RGB, cropped to its text, and the string drawn."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=int(rng.integers(*FONT_SIZES)))
    words = [str(word) for word in rng.choice(OCR_WORDS, size=int(rng.integers(1, 5)))]
    while len(words) > 1 and not _fits(font, " ".join(words)):
        words.pop()
    text = " ".join(words)
    left, top, right, bottom = font.getbbox(text)
    pad = int(rng.integers(*MARGIN))
    background = tuple(int(v) for v in rng.integers(190, 256, 3))
    ink = tuple(int(v) for v in rng.integers(0, 80, 3))
    image = Image.new("RGB", (right - left + 2 * pad, bottom - top + 2 * pad), background)
    ImageDraw.Draw(image).text((pad - left, pad - top), text, fill=ink, font=font)
    return np.asarray(image), text


def recognizer_input(image: np.ndarray) -> np.ndarray:
    """A line as the recognizer's [3, 48, 320] input (rapidocr's resize_norm_img at 320/48)."""
    from PIL import Image

    height, width = image.shape[:2]
    resized_width = min(LINE_WIDTH, math.ceil(LINE_HEIGHT * width / height))
    bgr = Image.fromarray(np.ascontiguousarray(image[:, :, ::-1]))
    resized = np.asarray(bgr.resize((resized_width, LINE_HEIGHT), Image.BILINEAR), np.float32)
    planar = (resized.transpose(2, 0, 1) / 255.0 - 0.5) / 0.5
    padded = np.zeros((3, LINE_HEIGHT, LINE_WIDTH), dtype=np.float32)
    padded[:, :, :resized_width] = planar
    return padded


def rapidocr_rec(folder: Path, lines: int = 48) -> tuple[Path, Path, Path]:
    """The recognizer, `lines` rendered lines (.npz, input `x`) and their strings (.json)."""
    folder = Path(folder)
    path = folder / REC_FILE
    if not path.exists():
        _rapidocr_file(REC_FILE)(folder)
    npz, labels = folder / f"rapidocr-lines-{lines}.npz", folder / f"rapidocr-lines-{lines}.json"
    if not (npz.exists() and labels.exists()):
        rng = np.random.default_rng(SEED)
        rendered = [text_line(rng) for _ in range(lines)]
        np.savez(npz, x=np.stack([recognizer_input(image) for image, _ in rendered]))
        labels.write_text(json.dumps([text for _, text in rendered], indent=0))
    return path, npz, labels
