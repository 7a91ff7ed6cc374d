"""Printed text rendered in code: single lines for a recognizer, pages for a text detector.

The words are real ones, from Python's docstrings (`corpus.words`), consecutive from a random
start so a line reads as prose. The face is DejaVu Sans, Serif or Sans Mono where the system has
them, else Pillow's bundled default font; dark ink on a light background.

Line i of H x W: a font of size H x U(0.55, 0.75), words added while they fit in W minus the
margins, drawn on a canvas of exactly H x W (so no resize distorts them); a third of the lines
stop after 1-3 words and leave the rest of the line blank, as short detected lines do. Page i:
a light background (blank paper, or a faded photograph crop on every other page) with lines of
several sizes at random heights. Each image depends only on (seed, i).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from optistudio.core.data.builtin.corpus import words
from optistudio.core.data.builtin.photos import crop_of, photographs

FONT_FOLDERS = (Path("/usr/share/fonts/truetype/dejavu"), Path("/usr/share/fonts/dejavu"))
FACES = ("DejaVuSans.ttf", "DejaVuSerif.ttf", "DejaVuSansMono.ttf")
Font = ImageFont.FreeTypeFont | ImageFont.ImageFont


@cache
def font_files() -> tuple[Path, ...]:
    """The DejaVu faces found on this system (none: Pillow's default font is used)."""
    found = [folder / face for face in FACES for folder in FONT_FOLDERS]
    return tuple(dict.fromkeys(path for path in found if path.is_file()))


def fonts_described() -> str:
    """'DejaVu Sans, Serif, Sans Mono' or "Pillow's default font"."""
    found = font_files()
    if not found:
        return "Pillow's default font"
    return "DejaVu " + ", ".join(path.stem.removeprefix("DejaVu") for path in found)


def text_line(index: int, size: tuple[int, int], seed: int = 0) -> Image.Image:
    """Line `index` at `size` (H, W), RGB; see the module docstring."""
    height, width = size
    rng = np.random.default_rng([seed, index, 1])
    font = _font(rng, max(6, round(height * rng.uniform(0.55, 0.75))))
    paper = _light(rng)
    image = Image.new("RGB", (width, height), paper)
    most = int(rng.integers(1, 4)) if rng.random() < 1 / 3 else None
    margin = max(2, height // 8)
    text = _fitting_words(rng, font, width - 2 * margin, most)
    _draw(ImageDraw.Draw(image), (margin, height / 2), text, font, _dark(rng), anchor="lm")
    return image


def text_page(index: int, size: tuple[int, int], seed: int = 0) -> Image.Image:
    """Page `index` at `size` (H, W), RGB: lines of text on paper or a faded photograph."""
    height, width = size
    rng = np.random.default_rng([seed, index, 2])
    image = _background(rng, size, faded_photo=index % 2 == 1)
    draw = ImageDraw.Draw(image)
    top = int(rng.integers(2, max(3, height // 10)))
    while top < height - 8:
        line = max(8, round(min(height, width) * rng.uniform(0.03, 0.09)))
        font = _font(rng, line)
        left = int(rng.integers(2, max(3, width // 6)))
        text = _fitting_words(rng, font, width - left - 2, None)
        _draw(draw, (left, top), text, font, _dark(rng), anchor="la")
        top += round(line * rng.uniform(1.4, 2.6))
    return image


def _background(rng: np.random.Generator, size: tuple[int, int], faded_photo: bool) -> Image.Image:
    height, width = size
    paper = Image.new("RGB", (width, height), _light(rng))
    shown = photographs()
    if not faded_photo or not shown:
        return paper
    photo = crop_of(shown[int(rng.integers(len(shown)))].image, size, rng)
    return Image.blend(paper, photo, 0.35)


def _fitting_words(rng: np.random.Generator, font: Font, room: int, most: int | None) -> str:
    """Consecutive corpus words from a random start while they fit in `room` pixels."""
    corpus = words()
    start = int(rng.integers(len(corpus)))
    text = corpus[start]
    for offset in range(1, most or len(corpus)):
        longer = f"{text} {corpus[(start + offset) % len(corpus)]}"
        if font.getlength(longer) > room:
            break
        text = longer
    return text


def _font(rng: np.random.Generator, size: int) -> Font:
    found = font_files()
    if not found:
        return ImageFont.load_default(size=size)
    return ImageFont.truetype(str(found[int(rng.integers(len(found)))]), size)


def _draw(
    draw: ImageDraw.ImageDraw,
    where: tuple[float, float],
    text: str,
    font: Font,
    ink: tuple[int, int, int],
    *,
    anchor: str,
) -> None:
    draw.text(where, text, fill=ink, font=font, anchor=anchor)


def _light(rng: np.random.Generator) -> tuple[int, int, int]:
    return tuple(int(v) for v in rng.integers(215, 256, 3))  # type: ignore[return-value]


def _dark(rng: np.random.Generator) -> tuple[int, int, int]:
    return tuple(int(v) for v in rng.integers(0, 60, 3))  # type: ignore[return-value]
