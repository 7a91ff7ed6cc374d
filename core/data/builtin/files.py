"""Bytes of real files, for models that read raw bytes (a file-type classifier such as magika).

The files are this Python's own: the standard library's sources (.py) and its compiled
extension modules (lib-dynload/*.so), in sorted order, so text and binary formats both occur.
Window i of L values: file i mod n of that list (a .py and a .so in turn), from the start of the
file for every other window (where formats put their signatures), else from a random offset;
a file shorter than L is padded with `pad` (256 for a vocabulary of 257 ids: magika's padding
token; else 0). Window i depends only on (seed, i).
"""

from __future__ import annotations

import sysconfig
from functools import cache
from pathlib import Path

import numpy as np

BYTE_IDS = 256
MOST_FILES = 64
"""Files taken from each kind (sources, extension modules): enough variety, little reading."""


@cache
def real_files() -> tuple[Path, ...]:
    """Standard-library sources and extension modules, alternating, MOST_FILES of each."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    sources = sorted(stdlib.glob("*.py"))[:MOST_FILES]
    binaries = sorted((stdlib / "lib-dynload").glob("*.so"))[:MOST_FILES]
    mixed = [path for pair in zip(sources, binaries, strict=False) for path in pair]
    longer = sources if len(sources) > len(binaries) else binaries
    return tuple(mixed + longer[len(mixed) // 2 :])


def byte_window(index: int, length: int, pad: int = 0, seed: int = 0) -> np.ndarray:
    """Window `index`: `length` byte values (0-255, then `pad`) of a real file, int64."""
    files = real_files()
    if not files:
        raise LookupError("no standard-library files were found to read bytes from")
    rng = np.random.default_rng([seed, index, 5])
    path = files[index % len(files)]
    size = path.stat().st_size
    start = 0 if index % 2 == 0 else int(rng.integers(0, max(1, size - length)))
    with path.open("rb") as handle:
        handle.seek(start)
        data = handle.read(length)
    window = np.full(length, pad, dtype=np.int64)
    window[: len(data)] = np.frombuffer(data, dtype=np.uint8)
    return window


def padding_for(vocab: int | None) -> int:
    """The padding id: BYTE_IDS for a vocabulary with one id past the bytes, else 0."""
    return BYTE_IDS if vocab is not None and vocab > BYTE_IDS else 0
