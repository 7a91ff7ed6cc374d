"""Natural photographs that installed packages ship, and crops of them at a model's size.

scikit-learn (installed with NNCF) ships two photographs, china.jpg and flower.jpg
(`sklearn.datasets.load_sample_images`); scikit-image, when installed, ships more inside its
wheel (`skimage.data`'s bundled files: astronaut, camera, chelsea, coffee, rocket...). Both are
read straight from the package's folder, without importing it and without a download; files
that a release no longer bundles (it fetches them with pooch) are simply not there.

Crop i of a set, for a target of H x W: photograph i mod n (round robin over the photographs),
a window of the target's aspect ratio covering a share s ~ U(0.35, 1) of the largest such window,
at a uniform position, mirrored with probability 1/2, resized bilinearly to W x H. Each crop
depends only on (seed, i), so a set is the same on every call.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
from PIL import Image

BUNDLED = (
    ("sklearn", "datasets/images", ("china.jpg", "flower.jpg")),
    (
        "skimage",
        "data",
        (
            "astronaut.png",
            "camera.png",
            "chelsea.png",
            "coffee.png",
            "coins.png",
            "moon.png",
            "motorcycle_left.png",
            "rocket.jpg",
        ),
    ),
)
"""(package, folder inside it, photographs) read when the package and the file are there."""
SMALLEST_SHARE = 0.35


@dataclass(frozen=True)
class Photograph:
    """One bundled photograph, decoded to RGB."""

    name: str
    package: str
    image: Image.Image


@cache
def photographs() -> tuple[Photograph, ...]:
    """The bundled photographs found here, in BUNDLED's order (RGB, gray ones converted)."""
    found = []
    for package, folder, names in BUNDLED:
        root = _package_folder(package)
        for name in names:
            path = root / folder / name if root else None
            if path is not None and path.is_file():
                with Image.open(path) as image:
                    found.append(Photograph(path.stem, package, image.convert("RGB")))
    return tuple(found)


def photo_crop(index: int, size: tuple[int, int], seed: int = 0) -> Image.Image:
    """Crop `index` of the set at `size` (H, W), as the module docstring says."""
    shown = photographs()
    if not shown:
        raise LookupError("no bundled photographs are installed (scikit-learn ships two)")
    photo = shown[index % len(shown)].image
    rng = np.random.default_rng([seed, index])
    return crop_of(photo, size, rng)


def crop_of(image: Image.Image, size: tuple[int, int], rng: np.random.Generator) -> Image.Image:
    """A random window of `image` with the aspect ratio of `size` (H, W), resized to it."""
    height, width = size
    largest = min(image.width / width, image.height / height)  # window = scale x (W, H)
    scale = largest * float(np.sqrt(rng.uniform(SMALLEST_SHARE, 1.0)))
    window = (max(1, round(width * scale)), max(1, round(height * scale)))
    left = int(rng.integers(0, image.width - window[0] + 1))
    top = int(rng.integers(0, image.height - window[1] + 1))
    crop = image.crop((left, top, left + window[0], top + window[1]))
    if rng.random() < 0.5:
        crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return crop.resize((width, height), Image.Resampling.BILINEAR)


def describe_photographs() -> str:
    """'2 scikit-learn photographs (china, flower)'."""
    shown = photographs()
    packages = {"sklearn": "scikit-learn", "skimage": "scikit-image"}
    by = sorted({packages[photo.package] for photo in shown})
    names = ", ".join(photo.name for photo in shown)
    return f"{len(shown)} {'/'.join(by)} photographs ({names})"


def _package_folder(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None
