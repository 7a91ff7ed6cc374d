"""Every reader of a user's .npz/.npy outside core/data holds its headers against the array
budget before it loads anything (issue 39, case 4): the CLI's --value NAME=@FILE, --values
and --inputs, a decoder's token ids, a regressor's labels and LiteRT's calibration data. A few
megabytes that declare a gigabyte are refused naming the budget, with far less allocated
meanwhile; files under the budget still read as before."""

from __future__ import annotations

import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from npz_bombs import npz_bomb
from onnx import TensorProto, helper

from optistudio.cli import build_parser
from optistudio.cli.args import array_values, input_options
from optistudio.core.backends import litert_convert
from optistudio.core.data.npy_headers import MAX_ARRAY_MB_ENV
from optistudio.core.errors import OptistudioError
from optistudio.core.llm.tokenize import text_ids
from optistudio.core.numerics.evaluators.base import evaluators

PEAK_LIMIT = 50 * 1024**2
"""What reading the headers and refusing may allocate: far below the 1 GiB array."""
GIB_FLOATS = 1 << 28


@pytest.fixture(scope="module")
def bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """x.npy in an .npz: float32 zeros [1, 2^28], 1 GiB loaded, a few MB on disk."""
    return npz_bomb(tmp_path_factory.mktemp("bomb") / "bomb.npz")


@pytest.fixture(scope="module")
def npy_bomb(bomb: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A .npy whose header declares int32 [2^28] (1 GiB) before a few bytes of data: what a
    load would allocate is the declaration, not the file."""
    path = tmp_path_factory.mktemp("npy") / "ids.npy"
    with path.open("wb") as out:
        header = {"descr": "<i4", "fortran_order": False, "shape": (GIB_FLOATS,)}
        np.lib.format.write_array_header_1_0(out, header)
        out.write(bytes(4096))
    return path


def _cli(*flags: str) -> object:
    return input_options(build_parser().parse_args(["bench", "m.onnx", *flags]))


def _calibration(path: Path) -> object:
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, GIB_FLOATS])]
    return next(litert_convert._representative(str(path), inputs)())


NPZ_READERS: dict[str, Callable[[Path], object]] = {
    "cli-value-from-file": lambda path: _cli("--value", f"x=@{path}"),
    "cli-values": array_values,
    "cli-inputs": lambda path: _cli("--inputs", str(path)),
    "litert-calibration": _calibration,
}
NPY_READERS: dict[str, Callable[[Path], object]] = {
    "token-ids": lambda path: text_ids(path, path.parent / "model.onnx"),
    "regression-labels": lambda path: (
        evaluators.get("regression").create().read_labels(path, samples=3)
    ),
}


def _refused(read: Callable[[Path], object], path: Path) -> tuple[OptistudioError, int]:
    """The refusal of read(path) and the peak of what was allocated until it came."""
    tracemalloc.start()
    try:
        with pytest.raises(OptistudioError) as refused:
            read(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return refused.value, peak


@pytest.mark.parametrize("reader", list(NPZ_READERS), ids=list(NPZ_READERS))
def test_an_npz_bomb_is_refused_from_its_header(
    bomb: Path, reader: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(MAX_ARRAY_MB_ENV, raising=False)

    refusal, peak = _refused(NPZ_READERS[reader], bomb)

    assert "'x'" in refusal.message and "[1x268435456]" in refusal.message
    assert "over the 512.0 MiB budget" in refusal.message
    assert MAX_ARRAY_MB_ENV in (refusal.hint or "")
    assert peak < PEAK_LIMIT, f"{peak / 1024**2:.0f} MiB allocated before the refusal"


@pytest.mark.parametrize("reader", list(NPY_READERS), ids=list(NPY_READERS))
def test_an_npy_declaring_a_gigabyte_is_refused_from_its_header(
    npy_bomb: Path, reader: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(MAX_ARRAY_MB_ENV, raising=False)

    refusal, peak = _refused(NPY_READERS[reader], npy_bomb)

    assert refusal.message == (
        "Array 'ids.npy' declares shape [268435456] int32: it holds 1.00 GiB, over the "
        "512.0 MiB budget for one read."
    )
    assert peak < PEAK_LIMIT, f"{peak / 1024**2:.0f} MiB allocated before the refusal"


def test_an_npz_given_as_npy_is_a_sentence_not_an_internal_error(tmp_path: Path) -> None:
    np.savez(tmp_path / "ids.npy", x=np.arange(3))  # np.load would hand back an NpzFile

    for read in NPY_READERS.values():
        with pytest.raises(OptistudioError, match=r"^'ids.npy' is not a readable .npy file"):
            read(tmp_path / "ids.npy")


def test_files_under_the_budget_read_as_before(tmp_path: Path) -> None:
    np.savez(tmp_path / "in.npz", x=np.arange(6, dtype=np.float32).reshape(3, 2))
    np.save(tmp_path / "ids.npy", np.array([[3, 1], [4, 1]], dtype=np.int32))
    np.save(tmp_path / "y.npy", np.array([[0.5], [1.5], [2.5]], dtype=np.float32))

    assert _cli("--inputs", str(tmp_path / "in.npz")).shapes == {"x": [3, 2]}
    assert array_values(tmp_path / "in.npz")["x"].shape == [3, 2]
    assert text_ids(tmp_path / "ids.npy", tmp_path / "m.onnx")[0].tolist() == [3, 1, 4, 1]
    labels = NPY_READERS["regression-labels"](tmp_path / "y.npy")
    assert labels.tolist() == [0.5, 1.5, 2.5]  # type: ignore[attr-defined]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])]
    samples = list(litert_convert._representative(str(tmp_path / "in.npz"), inputs)())
    assert [s[0].tolist() for s in samples] == [[[0.0, 1.0]], [[2.0, 3.0]], [[4.0, 5.0]]]


def test_litert_calibration_keeps_the_samples_the_budget_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MAX_ARRAY_MB_ENV, "1")  # 1 MiB: 16 samples of 64 KiB
    batches = [{"x": np.full((8, 16384), i, np.float32)} for i in range(4)]

    path = litert_convert.write_calibration(batches, tmp_path / "c.npz")

    with zipfile.ZipFile(path) as archive:
        assert archive.namelist() == ["x.npy"]
    with np.load(path) as saved:
        assert saved["x"].shape == (16, 16384)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16384])]
    assert len(list(litert_convert._representative(str(path), inputs)())) == 16
