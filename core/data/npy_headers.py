"""What an .npz or .npy declares, read from its headers before any array is loaded.

A .npy header states the dtype and shape of the array after it, so a 1 MB .npz can declare a
1 GiB array (its zeros deflate a thousandfold) and loading it would allocate that much. Here
each member's header is read (the magic string and a few hundred bytes; a deflated member is
decompressed only that far), and bytes = prod(shape) x itemsize, in Python integers, is held
against a budget before anything else is read. Object dtypes (pickles, which can run code) are
refused from the header too.

The budget is what one read may hold at once: MAX_ARRAY_MB_ENV in MiB, else
DEFAULT_MAX_ARRAY_MB, per array and for the arrays read together.
"""

from __future__ import annotations

import math
import os
import zipfile
from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from optistudio.core.data.zip_directory import check_member_count
from optistudio.core.errors import DataMismatch

MAX_ARRAY_MB_ENV = "OPTISTUDIO_MAX_ARRAY_MB"
DEFAULT_MAX_ARRAY_MB = 512
"""Most MiB an .npz/.npy read (one array, or the arrays read together) may declare."""
MAX_NPZ_MEMBERS = 10_000
"""Most members an .npz may hold: one array per model input, and models have hundreds."""
_NPZ_HINT = "Save one array per model input with np.savez(path, **{input_name: array})."


@dataclass(frozen=True)
class ArrayHeader:
    """One array as its .npy header declares it."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def array_budget() -> int:
    """Bytes one read may declare: MAX_ARRAY_MB_ENV (MiB) when set, else DEFAULT_MAX_ARRAY_MB."""
    text = os.environ.get(MAX_ARRAY_MB_ENV, "").strip()
    megabytes = int(text) if text.isdigit() and int(text) > 0 else DEFAULT_MAX_ARRAY_MB
    return megabytes * 1024**2


def npz_headers(source: Path | IO[bytes], label: str) -> dict[str, ArrayHeader]:
    """The header of every .npy member of an .npz (a path or a seekable binary stream), by
    array name.

    Raises DataMismatch, naming `label`, for a file that is not a readable .npz, one with more
    than MAX_NPZ_MEMBERS members, and an array of Python objects."""
    try:
        with _opened(source) as stream:
            check_member_count(stream, limit=MAX_NPZ_MEMBERS, label=label, hint=_NPZ_HINT)
            with zipfile.ZipFile(stream) as archive:
                entries = [name for name in archive.namelist() if name.endswith(".npy")]
                return {name.removesuffix(".npy"): _member(archive, name) for name in entries}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, NotImplementedError) as exc:
        raise DataMismatch(
            f"{label} is not a readable .npz file ({_reason(exc)}).", hint=_NPZ_HINT
        ) from None


def checked_npz_headers(source: Path | IO[bytes], label: str) -> dict[str, ArrayHeader]:
    """npz_headers, then check_budget over every array: what a reader that loads the whole
    .npz calls before np.load."""
    headers = npz_headers(source, label)
    check_budget(headers.values())
    return headers


def checked_npy_header(path: Path) -> ArrayHeader:
    """The header of the .npy file at `path`, held against the budget (check_budget) before
    the caller loads it.

    Raises DataMismatch, naming the file, for one that is not a readable .npy (an .npz
    included), an array of Python objects, and one over the budget."""
    path = Path(path)
    try:
        with path.open("rb") as stream:
            header = npy_header(stream, path.name)
    except (ValueError, OSError, EOFError) as exc:
        raise DataMismatch(
            f"{path.name!r} is not a readable .npy file ({_reason(exc)}).",
            hint="Save one array with np.save(path, array).",
        ) from None
    check_budget([header])
    return header


def npy_header(stream: IO[bytes], name: str) -> ArrayHeader:
    """The header at the start of a .npy stream, which is left just past it."""
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
    else:  # 2.0 and 3.0 share the layout (3.0 only allows utf-8 in structured field names)
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
    if dtype.hasobject:
        raise DataMismatch(
            f"Array {name!r} holds Python objects, which are not loaded (pickles can run code).",
            hint="Save numeric arrays only.",
        )
    return ArrayHeader(name, tuple(int(size) for size in shape), np.dtype(dtype), bool(fortran))


def check_budget(
    headers: Iterable[ArrayHeader], *, budget: int | None = None, rows: int | None = None
) -> None:
    """DataMismatch when an array, or all of them together, would hold more than `budget`
    bytes (default: array_budget()); with `rows`, only that many rows of each are held (a
    batch read from the first axis)."""
    limit = array_budget() if budget is None else budget
    held = [(header, _held_bytes(header, rows)) for header in headers]
    for header, size in held:
        if size > limit:
            what = f"{rows} row(s) of it hold" if rows is not None else "it holds"
            raise _over_budget(
                f"Array {header.name!r} declares shape {_shape(header)} {header.dtype}: "
                f"{what} {_size(size)}, over the {_size(limit)} budget for one read.",
            )
    total = sum(size for _, size in held)
    if total > limit:
        names = ", ".join(f"{header.name!r} {_shape(header)}" for header, _ in held[:8])
        raise _over_budget(
            f"The arrays together ({names}) declare {_size(total)}, over the {_size(limit)} "
            "budget for one read."
        )


def _opened(source: Path | IO[bytes]) -> AbstractContextManager[IO[bytes]]:
    return Path(source).open("rb") if isinstance(source, str | Path) else nullcontext(source)


def _reason(exc: BaseException) -> str:
    """What went wrong, without the server path an OSError's text carries."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc)


def _member(archive: zipfile.ZipFile, entry: str) -> ArrayHeader:
    with archive.open(entry) as stream:
        return npy_header(stream, entry.removesuffix(".npy"))


def _held_bytes(header: ArrayHeader, rows: int | None) -> int:
    if rows is None or not header.shape or header.fortran_order:
        return header.nbytes  # a Fortran-ordered array is read whole
    return min(rows, header.shape[0]) * math.prod(header.shape[1:]) * header.dtype.itemsize


def _over_budget(message: str) -> DataMismatch:
    return DataMismatch(
        message,
        hint=f"Give smaller arrays (or a smaller batch), or raise {MAX_ARRAY_MB_ENV} (in MiB) "
        "on a machine that has the memory.",
    )


def _shape(header: ArrayHeader) -> str:
    text = "x".join(map(str, header.shape[:8])) + ("x..." if len(header.shape) > 8 else "")
    return f"[{text[:80]}]"


def _size(size: int) -> str:
    if size >= 1024**5:
        return f"{float(size):.2e} bytes"
    return f"{size / 1024**3:,.2f} GiB" if size >= 1024**3 else f"{size / 1024**2:,.1f} MiB"
