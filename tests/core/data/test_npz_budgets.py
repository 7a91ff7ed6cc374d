"""An .npz of a few megabytes that declares a 1 GiB array is refused from its header, before
any array is read: the refusal names the array, its declared shape and the budget, and what
was allocated meanwhile stays far below the array (issue 39, case 4)."""

from __future__ import annotations

import io
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from npz_bombs import npz_bomb

from optistudio.core.data.datasets import NpzDataset, load_labels
from optistudio.core.data.inputs import read_input_arrays
from optistudio.core.data.npy_headers import (
    MAX_ARRAY_MB_ENV,
    MAX_NPZ_MEMBERS,
    check_budget,
    npz_headers,
)
from optistudio.core.errors import DataMismatch
from optistudio.core.model.info import TensorSpec

PEAK_LIMIT = 50 * 1024**2
"""What reading the headers and refusing may allocate: far below the 1 GiB array."""
SPEC = TensorSpec(name="x", dtype="float32", shape=["batch", 1 << 28])


@pytest.fixture(scope="module")
def bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return npz_bomb(tmp_path_factory.mktemp("bomb") / "bomb.npz")


def _first_batch(path: Path) -> object:
    return next(iter(NpzDataset(path, [SPEC]).batches()))


READERS: dict[str, Callable[[Path], object]] = {
    "dataset": _first_batch,
    "inputs-file": lambda path: read_input_arrays(path, [SPEC]),
}


@pytest.mark.parametrize("reader", list(READERS), ids=list(READERS))
def test_a_declared_gigabyte_is_refused_before_it_is_allocated(
    bomb: Path, reader: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(MAX_ARRAY_MB_ENV, raising=False)
    assert bomb.stat().st_size < 8 * 1024**2

    tracemalloc.start()
    try:
        with pytest.raises(DataMismatch) as refused:
            READERS[reader](bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    message = refused.value.message
    assert "'x'" in message and "[1x268435456]" in message and "512.0 MiB budget" in message
    assert MAX_ARRAY_MB_ENV in (refused.value.hint or "")
    assert peak < PEAK_LIMIT, f"{peak / 1024**2:.0f} MiB allocated before the refusal"


def test_the_budget_is_raised_by_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    headers = npz_headers(_npz(x=np.zeros((4, 8), np.float32)), "'small.npz'")
    monkeypatch.setenv(MAX_ARRAY_MB_ENV, "2048")
    check_budget(npz_headers(_declaring((1, 1 << 28)), "'big.npz'").values())  # 1 GiB < 2 GiB

    monkeypatch.delenv(MAX_ARRAY_MB_ENV)
    check_budget(headers.values())
    with pytest.raises(DataMismatch, match="over the 512.0 MiB budget"):
        check_budget(npz_headers(_declaring((1, 1 << 28)), "'big.npz'").values())


def test_a_batch_is_budgeted_by_its_rows_and_arrays_together() -> None:
    headers = npz_headers(_npz(a=np.zeros((10, 100), np.float32), b=np.zeros((10, 100))), "f")
    check_budget(headers.values(), budget=4000, rows=2)  # 800 + 1600 bytes

    with pytest.raises(DataMismatch, match=r"2 row\(s\) of it hold"):
        check_budget(headers.values(), budget=1000, rows=2)
    with pytest.raises(DataMismatch, match=r"together \('a' \[10x100\], 'b' \[10x100\]\)"):
        check_budget(headers.values(), budget=2000, rows=2)


def test_pickles_and_too_many_members_are_refused_from_the_directory_and_headers() -> None:
    pickled = _npz(x=np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(DataMismatch, match="'x' holds Python objects"):
        npz_headers(pickled, "'p.npz'")

    many = io.BytesIO()
    with zipfile.ZipFile(many, "w") as archive:
        for index in range(MAX_NPZ_MEMBERS + 1):
            archive.writestr(f"a{index}.npy", b"")
    with pytest.raises(DataMismatch, match="'many.npz' holds more than 10,000 members"):
        npz_headers(many, "'many.npz'")


def test_labels_are_read_after_their_header(tmp_path: Path) -> None:
    bomb = npz_bomb(tmp_path / "big.npz", name="labels", shape=(1 << 28,))
    with (
        zipfile.ZipFile(bomb) as archive,
        archive.open("labels.npy") as member,
        (tmp_path / "y.npy").open("wb") as out,
    ):
        out.write(member.read(4096))  # the header and the first zeros: a truncated file

    with pytest.raises(DataMismatch, match="over the 512.0 MiB budget"):
        load_labels(tmp_path / "y.npy", samples=3)
    np.save(tmp_path / "ok.npy", np.array([0, 2, 1]))
    assert load_labels(tmp_path / "ok.npy", samples=3).tolist() == [0, 2, 1]


def _npz(allow_pickle: bool = False, **arrays: np.ndarray) -> io.BytesIO:
    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=allow_pickle, **arrays)
    buffer.seek(0)
    return buffer


def _declaring(shape: tuple[int, ...]) -> io.BytesIO:
    """An .npz whose one member is only a header declaring `shape` (float32)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive, archive.open("x.npy", "w") as member:
        header = {"descr": "<f4", "fortran_order": False, "shape": shape}
        np.lib.format.write_array_header_1_0(member, header)
    buffer.seek(0)
    return buffer
