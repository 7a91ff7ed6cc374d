"""An image whose header declares more pixels than the cap is refused from the header, before
anything is decoded (issue 39, case 11: a 12000x12000 PNG, under Pillow's hard limit, was
decoded with only a warning, +310 MB)."""

from __future__ import annotations

import struct
import zipfile
import zlib
from pathlib import Path

import pytest
from PIL import Image

from optistudio.core.data.images import (
    DEFAULT_MAX_IMAGE_MP,
    MAX_IMAGE_MP_ENV,
    ImageDataset,
    ImagePreprocessing,
)
from optistudio.core.errors import DataMismatch
from optistudio.core.model.info import TensorSpec

IMAGE_INPUT = [TensorSpec(name="image", dtype="float32", shape=[1, 3, 8, 8])]


def blank_png(path: Path, width: int, height: int) -> Path:
    """A 1-bit gray PNG of zeros written chunk by chunk: kilobytes on disk at any size."""
    row = b"\x00" + bytes((width + 7) // 8)  # filter byte, then the packed pixels
    packer = zlib.compressobj(9)
    data = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", data))
    with path.open("ab") as file:
        file.write(_chunk(b"IEND", b""))
    return path


def _chunk(kind: bytes, body: bytes) -> bytes:
    crc = zlib.crc32(kind + body)
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)


@pytest.fixture
def bomb_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "images"
    folder.mkdir()
    blank_png(folder / "a.png", 8, 8)
    blank_png(folder / "big.png", 12_000, 12_000)
    return folder


def test_a_12000_pixel_square_png_is_refused_from_its_header(
    bomb_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(MAX_IMAGE_MP_ENV, raising=False)
    assert (bomb_folder / "big.png").stat().st_size < 100_000
    with Image.open(bomb_folder / "big.png") as image:  # under Pillow's hard limit: a warning
        assert image.size == (12_000, 12_000)

    with pytest.raises(DataMismatch) as refused:
        ImageDataset(bomb_folder, IMAGE_INPUT, ImagePreprocessing())

    assert refused.value.message == (
        "Image 'big.png' in 'images' is 12000x12000 pixels (144 MP), over the 64 MP an image "
        "may hold."
    )
    assert MAX_IMAGE_MP_ENV in (refused.value.hint or "")


def test_a_zipped_bomb_is_refused_too(bomb_folder: Path, tmp_path: Path) -> None:
    archive = tmp_path / "images.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        for path in sorted(bomb_folder.iterdir()):
            zipped.write(path, path.name)

    with pytest.raises(DataMismatch, match="'big.png' in 'images.zip' is 12000x12000 pixels"):
        ImageDataset(archive, IMAGE_INPUT, ImagePreprocessing())


def test_the_cap_is_raised_by_its_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "images"
    folder.mkdir()
    side = 1_000 * int((DEFAULT_MAX_IMAGE_MP + 1) ** 0.5 + 1)
    blank_png(folder / "wide.png", side, side)  # just over the default cap
    with pytest.raises(DataMismatch, match="over the 64 MP"):
        ImageDataset(folder, IMAGE_INPUT, ImagePreprocessing())

    monkeypatch.setenv(MAX_IMAGE_MP_ENV, "100")
    dataset = ImageDataset(folder, IMAGE_INPUT, ImagePreprocessing())
    assert next(iter(dataset.batches()))["image"].shape == (1, 3, 8, 8)
