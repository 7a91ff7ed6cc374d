"""Image folders and .zip archives as model input, with declared preprocessing.

Every image goes through the same steps, in this order:

1. decode with Pillow and convert to RGB (or to 8-bit gray for GRAY); EXIF orientation is
   *not* applied, as in torchvision's ImageFolder;
2. resize to (H, W) with bilinear filtering: "stretch" resizes straight to H x W;
   "shorter_side_then_center_crop" scales by s = max(H / h, W / w), so the image covers the
   target with its aspect ratio kept, then cuts the central H x W window
   (offset = (excess) // 2);
3. BGR reverses the channel order of RGB;
4. per channel c: x = (pixel * scale - mean[c]) / std[c], computed in float32; with the
   defaults (scale 1/255, mean 0, std 1) that is pixel / 255 in [0, 1], as torchvision's
   ToTensor; ImageNet models use mean (0.485, 0.456, 0.406), std (0.229, 0.224, 0.225);
5. cast to `dtype` (integer dtypes are rounded and clipped to their range) and lay out as
   NCHW (channels first) or NHWC.

`ImageDataset` satisfies `optistudio.core.data.source.CalibrationSource`, like the datasets in
`optistudio.core.data.datasets`: it lists the files up front, checks that each one is an image (headers only),
and decodes one batch at a time.

An image of more than MAX_IMAGE_MP_ENV megapixels (default DEFAULT_MAX_IMAGE_MP) is refused
from its header, before decoding: Pillow only warns below twice its own 89.5 MP limit, and a
12000x12000 PNG of a few kilobytes decodes to 144 MP (432 MB as RGB).
"""

from __future__ import annotations

import math
import os
import re
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import IO, Literal

import numpy as np
from PIL import Image
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from optistudio.core.data.batch import check_whole_batches, declared_batch
from optistudio.core.errors import DataMismatch
from optistudio.core.model.info import Dim, TensorSpec

MAX_IMAGE_MP_ENV = "OPTISTUDIO_MAX_IMAGE_MP"
DEFAULT_MAX_IMAGE_MP = 64
"""Most megapixels (10^6 pixels) an image may hold; a 64 MP photograph is 8000x8000."""
IMAGE_SUFFIXES = (".bmp", ".jpeg", ".jpg", ".png", ".webp")
"""File name endings (any case) that count as images; other files are skipped."""

_FORMATS = ["BMP", "JPEG", "PNG", "WEBP"]
_SKIPPED_PARTS = {"__MACOSX"}
_READ_ERRORS = (
    OSError,
    ValueError,
    SyntaxError,
    EOFError,
    zipfile.BadZipFile,
    Image.DecompressionBombError,
)
_SOURCE_HINT = "Give a folder of images, or a .zip of them (" + ", ".join(IMAGE_SUFFIXES) + ")."

Opener = Callable[[str], IO[bytes]]


class ImagePreprocessing(BaseModel):
    """How images become the model's input tensor (see the module docstring for the math)."""

    model_config = ConfigDict(extra="forbid")

    size: tuple[int, int] | None = Field(
        default=None,
        description="Target (height, width) in pixels. Leave unset to use the model's input "
        "size, which must then be fixed.",
    )
    resize: Literal["stretch", "shorter_side_then_center_crop"] = Field(
        default="stretch",
        description="'stretch' resizes straight to the target size (aspect ratio not kept); "
        "'shorter_side_then_center_crop' scales until the image covers the target, keeping its "
        "aspect ratio, then cuts the centre.",
    )
    layout: Literal["NCHW", "NHWC"] = Field(
        default="NCHW",
        description="Axis order of the input tensor: channels first (NCHW, PyTorch) or last "
        "(NHWC, TensorFlow).",
    )
    color: Literal["RGB", "BGR", "GRAY"] = Field(
        default="RGB",
        description="Channel order the model was trained on; GRAY gives one channel.",
    )
    scale: float = Field(
        default=1 / 255,
        description="Pixel values (0-255) are multiplied by this before mean and std.",
    )
    mean: tuple[float, ...] = Field(
        default=(0.0, 0.0, 0.0),
        description="Subtracted per channel after scaling, in the order of `color`; one value "
        "for GRAY (the default then becomes (0,)).",
    )
    std: tuple[float, ...] = Field(
        default=(1.0, 1.0, 1.0),
        description="Divides per channel after the mean, in the order of `color`; one value for "
        "GRAY (the default then becomes (1,)).",
    )
    dtype: str = Field(
        default="float32",
        description="numpy dtype of the tensor; must be the model input's dtype.",
    )

    @property
    def channels(self) -> int:
        """1 for GRAY, 3 for RGB and BGR."""
        return 1 if self.color == "GRAY" else 3

    @field_validator("size")
    @classmethod
    def _positive_size(cls, size: tuple[int, int] | None) -> tuple[int, int] | None:
        if size is not None and min(size) < 1:
            raise ValueError(f"height and width must be at least 1, not {size}")
        return size

    @field_validator("scale")
    @classmethod
    def _usable_scale(cls, scale: float) -> float:
        if not math.isfinite(scale) or scale == 0:
            raise ValueError(f"scale must be a finite, non-zero number, not {scale}")
        return scale

    @field_validator("std")
    @classmethod
    def _nonzero_std(cls, std: tuple[float, ...]) -> tuple[float, ...]:
        if any(not math.isfinite(value) or value == 0 for value in std):
            raise ValueError(f"every std must be a finite, non-zero number, not {std}")
        return std

    @field_validator("dtype")
    @classmethod
    def _numeric_dtype(cls, dtype: str) -> str:
        try:
            parsed = np.dtype(dtype)
        except TypeError as exc:
            raise ValueError(f"{dtype!r} is not a numpy dtype") from exc
        if parsed.kind not in "fiu":
            raise ValueError(f"dtype must be a float or integer type, not {dtype!r}")
        return parsed.name

    @model_validator(mode="after")
    def _one_value_per_channel(self) -> ImagePreprocessing:
        if self.channels == 1 and "mean" not in self.model_fields_set:
            self.mean = (0.0,)
        if self.channels == 1 and "std" not in self.model_fields_set:
            self.std = (1.0,)
        for name, values in (("mean", self.mean), ("std", self.std)):
            if len(values) != self.channels:
                raise ValueError(
                    f"{name} has {len(values)} value(s) but color {self.color!r} has "
                    f"{self.channels} channel(s)"
                )
        return self


class ImageDataset:
    """Images from a folder (searched recursively) or a .zip, fed to a one-input, rank-4 model.

    Files are taken in the order of `names()`: paths relative to the source, '/'-separated,
    sorted by code point ('img10.png' before 'img2.png': zero-pad numbers). Labels for task
    accuracy (`optistudio.core.data.datasets.load_labels`, .npy or CSV) must follow that order. Hidden files
    and folders (a leading '.') and `__MACOSX` are skipped, as are files that do not end in
    one of IMAGE_SUFFIXES. Raises DataMismatch when the model, the preprocessing and the files
    do not fit together; a file that only turns out to be corrupt when decoded raises it from
    `batches()`, naming the file.
    """

    synthetic = False

    def __init__(
        self,
        source: Path,
        inputs: list[TensorSpec],
        preprocessing: ImagePreprocessing,
        *,
        batch_size: int | None = None,
    ) -> None:
        self.source = Path(source)
        self.inputs = inputs
        self.preprocessing = preprocessing
        self.input = _image_input(inputs)
        asked = declared_batch([self.input]) if batch_size is None else batch_size
        self.batch_size = _check_batch_size(asked, self.input)
        _check_dtype(self.input, preprocessing)
        _check_channels(self.input, preprocessing)
        self.size = _target_size(self.input, preprocessing)
        self._files = _ImageFiles(self.source)
        self._files.check_headers()
        check_whole_batches(len(self._files.names), _fixed(self.input.shape[0]), "The data")

    def __len__(self) -> int:
        return len(self._files.names)

    def names(self) -> list[str]:
        """The image files, relative to the source, in the order their samples come."""
        return list(self._files.names)

    @property
    def description(self) -> str:
        pre = self.preprocessing
        height, width = self.size
        fit = "resized" if pre.resize == "stretch" else "scaled and center-cropped"
        return (
            f"{len(self)} images from {self.source.name}, {fit} to {height}x{width}, "
            f"{pre.layout} {pre.color}, scale {pre.scale:.6g}, mean {_numbers(pre.mean)} "
            f"std {_numbers(pre.std)}, {pre.dtype}, batch {self.batch_size}"
        )

    def batches(self) -> Iterator[dict[str, np.ndarray]]:
        names = self._files.names
        with self._files.opener() as open_file:
            for start in range(0, len(names), self.batch_size):
                chunk = names[start : start + self.batch_size]
                arrays = [self._load(open_file, name) for name in chunk]
                yield {self.input.name: np.stack(arrays)}

    def _load(self, open_file: Opener, name: str) -> np.ndarray:
        mode = "L" if self.preprocessing.color == "GRAY" else "RGB"
        try:
            with open_file(name) as stream, Image.open(stream, formats=_FORMATS) as image:
                _check_pixels(self.source, name, image)
                converted = image.convert(mode)
        except _READ_ERRORS as exc:
            raise _unreadable(self.source, name, exc) from exc
        return preprocess(converted, self.preprocessing, self.size)


def preprocess(image: Image.Image, pre: ImagePreprocessing, size: tuple[int, int]) -> np.ndarray:
    """One image as a [C, H, W] or [H, W, C] array (no batch axis), per the module docstring."""
    mode = "L" if pre.color == "GRAY" else "RGB"
    image = image if image.mode == mode else image.convert(mode)
    pixels = np.asarray(_resize(image, size, pre.resize), dtype=np.float32)
    pixels = pixels[:, :, None] if pre.color == "GRAY" else pixels
    pixels = pixels[:, :, ::-1] if pre.color == "BGR" else pixels
    mean = np.asarray(pre.mean, dtype=np.float32)
    std = np.asarray(pre.std, dtype=np.float32)
    values = (pixels * np.float32(pre.scale) - mean) / std
    values = values.transpose(2, 0, 1) if pre.layout == "NCHW" else values
    return np.ascontiguousarray(_cast(values, np.dtype(pre.dtype)))


def _resize(image: Image.Image, size: tuple[int, int], mode: str) -> Image.Image:
    height, width = size
    bilinear = Image.Resampling.BILINEAR
    if mode == "stretch":
        return image.resize((width, height), bilinear)
    scale = max(height / image.height, width / image.width)
    covered = (max(width, round(image.width * scale)), max(height, round(image.height * scale)))
    image = image.resize(covered, bilinear)
    left, top = (covered[0] - width) // 2, (covered[1] - height) // 2
    return image.crop((left, top, left + width, top + height))


def _cast(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype.kind in "iu":
        limits = np.iinfo(dtype)
        values = np.clip(np.rint(values), limits.min, limits.max)
    return values.astype(dtype)


class _ImageFiles:
    """The image files of a folder or a .zip, sorted; `opener()` reads them one at a time."""

    def __init__(self, source: Path) -> None:
        self.source = source
        if source.is_dir():
            self.names = _folder_names(source)
        elif source.is_file() and source.suffix.lower() == ".zip":
            self.names = _zip_names(source)
        elif source.exists():
            raise DataMismatch(
                f"{source.name!r} is neither a folder nor a .zip file.", hint=_SOURCE_HINT
            )
        else:
            raise DataMismatch(f"Image source {source.name!r} does not exist.", hint=_SOURCE_HINT)
        if not self.names:
            raise DataMismatch(f"No images found in {source.name!r}.", hint=_SOURCE_HINT)

    @contextmanager
    def opener(self) -> Iterator[Opener]:
        if self.source.is_dir():
            yield lambda name: (self.source / name).open("rb")
            return
        with zipfile.ZipFile(self.source) as archive:
            yield lambda name: archive.open(name)

    def check_headers(self) -> None:
        """Raise DataMismatch naming the first file whose header is not a supported image."""
        with self.opener() as open_file:
            for name in self.names:
                try:
                    with open_file(name) as stream, Image.open(stream, formats=_FORMATS) as image:
                        _check_pixels(self.source, name, image)
                except _READ_ERRORS as exc:
                    raise _unreadable(self.source, name, exc) from exc


def _folder_names(root: Path) -> list[str]:
    relative = (path.relative_to(root).as_posix() for path in root.rglob("*") if path.is_file())
    return sorted(name for name in relative if _is_image_name(name))


def _zip_names(path: Path) -> list[str]:
    try:
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise DataMismatch(
            f"{path.name!r} is not a readable .zip file ({exc}).", hint=_SOURCE_HINT
        ) from exc
    for entry in entries:
        _refuse_unsafe_member(path, entry.filename)
    files = (entry.filename for entry in entries if not entry.is_dir())
    return sorted(name for name in files if _is_image_name(name))


def _refuse_unsafe_member(archive: Path, name: str) -> None:
    posix = name.replace("\\", "/")
    if posix.startswith("/") or re.match(r"[A-Za-z]:", posix) or ".." in posix.split("/"):
        raise DataMismatch(
            f"{archive.name!r} holds {name!r}, an absolute path or one with '..'; such archives "
            "are refused.",
            hint="Zip the images with paths relative to the archive's root.",
        )


def _is_image_name(name: str) -> bool:
    parts = PurePosixPath(name.replace("\\", "/")).parts
    hidden = any(part.startswith(".") or part in _SKIPPED_PARTS for part in parts)
    return not hidden and name.lower().endswith(IMAGE_SUFFIXES)


def max_image_pixels() -> int:
    """MAX_IMAGE_MP_ENV megapixels when set to a positive number, else DEFAULT_MAX_IMAGE_MP."""
    text = os.environ.get(MAX_IMAGE_MP_ENV, "").strip()
    megapixels = int(text) if text.isdigit() and int(text) > 0 else DEFAULT_MAX_IMAGE_MP
    return megapixels * 1_000_000


def _check_pixels(source: Path, name: str, image: Image.Image) -> None:
    """DataMismatch, from the header, for an image over max_image_pixels()."""
    width, height = image.size
    cap = max_image_pixels()
    if width * height > cap:
        raise DataMismatch(
            f"Image {name!r} in {source.name!r} is {width}x{height} pixels "
            f"({width * height / 1e6:,.0f} MP), over the {cap // 1_000_000} MP an image may "
            "hold.",
            hint=f"Resize it first (models take a few hundred pixels a side), or raise "
            f"{MAX_IMAGE_MP_ENV} on a machine that has the memory.",
        )


def _unreadable(source: Path, name: str, exc: BaseException) -> DataMismatch:
    return DataMismatch(
        f"Image {name!r} in {source.name!r} cannot be read ({exc}).",
        hint="Replace or remove the file; accepted formats are " + ", ".join(_FORMATS) + ".",
    )


def _image_input(inputs: list[TensorSpec]) -> TensorSpec:
    if len(inputs) == 1 and len(inputs[0].shape) == 4:
        return inputs[0]
    found = ", ".join(f"{spec.name!r} {_shape_text(spec.shape)}" for spec in inputs) or "none"
    raise DataMismatch(
        "Images need a model with exactly one input of rank 4 ([batch, channels, height, width] "
        f"or [batch, height, width, channels]); the model's inputs are: {found}.",
        hint="For other models, give an .npz with one array per input.",
    )


def _check_batch_size(batch_size: int, spec: TensorSpec) -> int:
    if batch_size < 1:
        raise DataMismatch(f"Batch size must be at least 1, not {batch_size}.")
    fixed = _fixed(spec.shape[0])
    if fixed is not None and fixed != batch_size:
        raise DataMismatch(
            f"Input {spec.name!r} has a fixed batch of {fixed}; batch size {batch_size} "
            "cannot be used.",
            hint=f"Use batch size {fixed}.",
        )
    return batch_size


def _check_dtype(spec: TensorSpec, pre: ImagePreprocessing) -> None:
    if np.dtype(spec.dtype) != np.dtype(pre.dtype):
        raise DataMismatch(
            f"Input {spec.name!r} expects dtype {spec.dtype} but the preprocessing makes "
            f"{pre.dtype}.",
            hint=f"Set the preprocessing dtype to {spec.dtype!r}.",
        )


def _check_channels(spec: TensorSpec, pre: ImagePreprocessing) -> None:
    axis, other_axis = (1, 3) if pre.layout == "NCHW" else (3, 1)
    wanted = _fixed(spec.shape[axis])
    if wanted is None or wanted == pre.channels:
        return
    other_layout = "NHWC" if pre.layout == "NCHW" else "NCHW"
    hints = {1: "Set color 'GRAY'.", 3: "Set color 'RGB' or 'BGR'."}
    hint = hints.get(wanted)
    if _fixed(spec.shape[other_axis]) == pre.channels:
        hint = f"The model's shape looks {other_layout}: set layout {other_layout!r}."
    raise DataMismatch(
        f"Input {spec.name!r} {_shape_text(spec.shape)} expects {wanted} channel(s) in "
        f"{pre.layout} layout but color {pre.color!r} gives {pre.channels}.",
        hint=hint,
    )


def _target_size(spec: TensorSpec, pre: ImagePreprocessing) -> tuple[int, int]:
    axes = (2, 3) if pre.layout == "NCHW" else (1, 2)
    height, width = (_fixed(spec.shape[axis]) for axis in axes)
    if pre.size is None:
        if height is None or width is None:
            raise DataMismatch(
                f"Input {spec.name!r} {_shape_text(spec.shape)} has a dynamic height or width, "
                "so the image size cannot be taken from the model.",
                hint="Set the preprocessing size to (height, width).",
            )
        return height, width
    for model_dim, wanted in zip((height, width), pre.size, strict=True):
        if model_dim is not None and model_dim != wanted:
            raise DataMismatch(
                f"Input {spec.name!r} {_shape_text(spec.shape)} takes {pre.layout} images of "
                f"fixed size, but the preprocessing resizes to {pre.size[0]}x{pre.size[1]} (HxW).",
                hint="Leave the size unset to use the model's.",
            )
    return pre.size


def _fixed(dim: Dim) -> int | None:
    return dim if isinstance(dim, int) and dim > 0 else None


def _shape_text(shape: list[Dim]) -> str:
    return "[" + ", ".join("?" if dim is None else str(dim) for dim in shape) + "]"


def _numbers(values: tuple[float, ...]) -> str:
    return "(" + ", ".join(f"{value:.6g}" for value in values) + ")"
