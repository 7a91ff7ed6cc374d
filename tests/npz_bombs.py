"""An .npz whose one member declares a large array of zeros: a few megabytes on disk, a gigabyte
or more when loaded (deflate packs zeros about a thousandfold)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

_CHUNK = 1 << 24


def npz_bomb(path: Path, name: str = "x", shape: tuple[int, ...] = (1, 1 << 28)) -> Path:
    """`path` holding `name`.npy, float32 zeros of `shape` (default 1 GiB), written in chunks."""
    size = int(np.prod(shape)) * 4
    header = {"descr": "<f4", "fortran_order": False, "shape": shape}
    with (
        zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive,
        archive.open(f"{name}.npy", "w", force_zip64=True) as member,
    ):
        np.lib.format.write_array_header_1_0(member, header)
        zeros = bytes(_CHUNK)
        for start in range(0, size, _CHUNK):
            member.write(zeros[: min(_CHUNK, size - start)])
    return path
