"""Input data for calibration and accuracy checks: user .npz files, synthetic data, labels.

Both datasets satisfy `optistudio.core.data.source.CalibrationSource`: `batches()` streams
dicts of input name -> array and starts over on every call, so memory stays bounded by one batch.

An .npz is a zip of .npy members, which numpy cannot memory-map (and cannot map at all when
compressed). `NpzDataset` therefore reads only each member's header up front, to validate names,
dtypes and shapes, and then reads rows batch by batch from the (possibly deflated) zip stream.
What one batch holds (or a Fortran-ordered array, read whole) is held against the budget of
`optistudio.core.data.npy_headers` from those headers, before any row is read.
"""

from __future__ import annotations

import csv
import math
import zipfile
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import IO

import numpy as np

from optistudio.core.data.batch import (
    BatchAxes,
    batch_axis,
    batch_dim_names,
    check_whole_batches,
    declared_batch,
)
from optistudio.core.data.images import ImageDataset, ImagePreprocessing
from optistudio.core.data.inputs import (
    InputValue,
    shapes_of,
    synthesize_inputs,
)
from optistudio.core.data.npy_headers import ArrayHeader, check_budget, npy_header, npz_headers
from optistudio.core.errors import DataMismatch
from optistudio.core.model.info import TensorSpec

_NPZ_HINT = "Save one array per model input with np.savez(path, **{input_name: array})."


class NpzDataset:
    """Named input arrays from an .npz (first axis = samples = the model's batch dimension).

    Raises DataMismatch up front when names, dtypes, ranks, fixed dims or sample counts do not
    fit `inputs`, or when one batch would hold more than the array budget (npy_headers). Rows are read lazily per batch; a Fortran-ordered array (rare; np.save writes
    C order) cannot be streamed and is read whole on each pass instead.
    """

    synthetic = False

    def __init__(
        self, path: Path, inputs: list[TensorSpec], *, batch_size: int | None = None
    ) -> None:
        self.path = Path(path)
        self.inputs = inputs
        asked = declared_batch(inputs) if batch_size is None else batch_size
        self.batch_size = _check_batch_size(asked, inputs)
        self._members = _read_members(self.path)
        _check_names(self._members, inputs)
        for spec in inputs:
            _check_member(self._members[spec.name], spec)
        self._samples = _common_samples(self._members, inputs)
        fixed = self.batch_size if any(_fixed_batch(spec) for spec in inputs) else None
        check_whole_batches(self._samples, fixed, f"{self.path.name!r}")
        check_budget([self._members[spec.name] for spec in inputs], rows=self.batch_size)

    def __len__(self) -> int:
        return self._samples

    @property
    def description(self) -> str:
        names = ", ".join(spec.name for spec in self.inputs)
        return f"{self._samples} samples from {self.path.name} ({names}), batch {self.batch_size}"

    def batches(self) -> Iterator[dict[str, np.ndarray]]:
        with zipfile.ZipFile(self.path) as archive, ExitStack() as stack:
            readers = {
                spec.name: _RowReader(self.path, archive, self._members[spec.name], stack)
                for spec in self.inputs
            }
            for start in range(0, self._samples, self.batch_size):
                count = min(self.batch_size, self._samples - start)
                yield {name: reader.read(count) for name, reader in readers.items()}


class SyntheticDataset:
    """Random inputs from `optistudio.core.data.inputs.synthesize_inputs`, a different seed for every batch.

    With a fixed batch dim, `samples` rounds up to whole batches. `shapes`, `values` and
    `arrays` are the user's (see optistudio.core.data.inputs): an input given a full shape or
    an array has it in every batch. Warnings about dynamic dims that fell back to defaults are
    kept in `warnings`.
    """

    synthetic = True

    def __init__(
        self,
        inputs: list[TensorSpec],
        *,
        samples: int = 32,
        batch_size: int | None = None,
        dims: dict[str, int] | None = None,
        seed: int = 0,
        shapes: dict[str, list[int]] | None = None,
        values: dict[str, InputValue] | None = None,
        arrays: dict[str, np.ndarray] | None = None,
        batch_axes: BatchAxes | None = None,
    ) -> None:
        if samples < 1:
            raise DataMismatch(f"A synthetic dataset needs at least 1 sample, not {samples}.")
        self.inputs = inputs
        self.dims = dict(dims or {})
        self.seed = seed
        self.arrays = dict(arrays or {})
        self.shapes = {**(shapes or {}), **shapes_of(self.arrays)}
        self.values = dict(values or {})
        self.batch_axes = dict(batch_axes or {})
        names = batch_dim_names(inputs, self.batch_axes)
        batched = [
            s
            for s in inputs
            if s.name not in self.shapes and batch_axis(s, names, self.batch_axes) == 0
        ]
        declared = declared_batch(inputs, self.shapes, self.batch_axes)
        asked = declared if batch_size is None else batch_size
        self.batch_size = _check_batch_size(asked, batched)
        fixed = any(_fixed_batch(spec) for spec in batched)
        whole = math.ceil(samples / self.batch_size) * self.batch_size
        self._samples = whole if fixed else samples
        first_batch = self.batch_size if fixed else 1
        self.warnings = self._feeds(first_batch, seed)[1]

    def __len__(self) -> int:
        return self._samples

    @property
    def description(self) -> str:
        return (
            f"{self._samples} synthetic samples (random inputs, seed {self.seed}), "
            f"batch {self.batch_size}"
        )

    def batches(self) -> Iterator[dict[str, np.ndarray]]:
        for index, start in enumerate(range(0, self._samples, self.batch_size)):
            count = min(self.batch_size, self._samples - start)
            yield self._feeds(count, self.seed + index)[0]

    def _feeds(self, batch_size: int, seed: int) -> tuple[dict[str, np.ndarray], list[str]]:
        return synthesize_inputs(
            self.inputs,
            batch_size=batch_size,
            dims=self.dims,
            overrides=self.shapes,
            seed=seed,
            values=self.values,
            arrays=self.arrays,
            batch_axes=self.batch_axes,
        )


def open_dataset(
    path: Path,
    inputs: list[TensorSpec],
    *,
    batch_size: int | None = None,
    preprocessing: ImagePreprocessing | None = None,
) -> NpzDataset | ImageDataset:
    """An NpzDataset for an .npz file, an ImageDataset for a folder or a .zip of images.

    Images without `preprocessing` get the defaults (model's size, NCHW RGB, pixel / 255).
    Preprocessing given with an .npz is refused rather than silently ignored.
    """
    path = Path(path)
    if path.suffix.lower() == ".npz":
        if preprocessing is not None:
            raise DataMismatch(
                f"Image preprocessing was given, but {path.name!r} holds arrays, not images.",
                hint="Drop the preprocessing, or give a folder or a .zip of images.",
            )
        return NpzDataset(path, inputs, batch_size=batch_size)
    if path.is_dir() or path.suffix.lower() == ".zip":
        chosen = preprocessing or ImagePreprocessing()
        return ImageDataset(path, inputs, chosen, batch_size=batch_size)
    raise DataMismatch(
        f"{path.name!r} is not a dataset this studio reads.",
        hint="Give an .npz of named input arrays, or a folder or a .zip of images.",
    )


def load_labels(path: Path, *, samples: int) -> np.ndarray:
    """Integer class labels, one per sample, from a .npy (1-D) or a CSV file.

    A CSV holds one integer per line, or a header row and a column named 'label'. Raises
    DataMismatch for a wrong count, a non-integer entry or a missing 'label' column.
    """
    path = Path(path)
    labels = _npy_labels(path) if path.suffix.lower() == ".npy" else _csv_labels(path)
    if len(labels) != samples:
        raise DataMismatch(
            f"labels have {len(labels)} entries but the dataset has {samples} samples.",
            hint="Give exactly one label per sample, in the dataset's order.",
        )
    return labels


class _RowReader:
    """Reads consecutive rows of one .npz member, `count` rows at a time."""

    def __init__(
        self, path: Path, archive: zipfile.ZipFile, member: ArrayHeader, stack: ExitStack
    ) -> None:
        self.member = member
        self._whole: np.ndarray | None = None
        self._offset = 0
        self._row_bytes = math.prod(member.shape[1:]) * member.dtype.itemsize
        if member.fortran_order and len(member.shape) > 1:
            with np.load(path, allow_pickle=False) as npz:
                self._whole = npz[member.name]
            return
        self._stream: IO[bytes] = stack.enter_context(archive.open(f"{member.name}.npy"))
        npy_header(self._stream, member.name)

    def read(self, count: int) -> np.ndarray:
        if self._whole is not None:
            rows = self._whole[self._offset : self._offset + count]
            self._offset += count
            return np.ascontiguousarray(rows)
        data = self._stream.read(count * self._row_bytes)
        rows = np.frombuffer(data, dtype=self.member.dtype)
        return rows.reshape((count, *self.member.shape[1:])).copy()


def _read_members(path: Path) -> dict[str, ArrayHeader]:
    """Each array's header (nothing else is read yet); DataMismatch for an unreadable file."""
    if not path.is_file():
        raise DataMismatch(f"Data file {path.name!r} does not exist.", hint=_NPZ_HINT)
    return npz_headers(path, repr(path.name))


def _check_batch_size(batch_size: int, inputs: list[TensorSpec]) -> int:
    if batch_size < 1:
        raise DataMismatch(f"Batch size must be at least 1, not {batch_size}.")
    for spec in inputs:
        first = spec.shape[0] if spec.shape else None
        if _fixed_batch(spec) and first != batch_size:
            raise DataMismatch(
                f"Input {spec.name!r} has a fixed batch of {first}; batch size {batch_size} "
                "cannot be used.",
                hint=f"Use batch size {first}.",
            )
    return batch_size


def _fixed_batch(spec: TensorSpec) -> bool:
    return bool(spec.shape) and isinstance(spec.shape[0], int) and spec.shape[0] > 0


def _check_names(members: dict[str, ArrayHeader], inputs: list[TensorSpec]) -> None:
    expected = [spec.name for spec in inputs]
    found = sorted(members)
    missing = [name for name in expected if name not in members]
    extra = [name for name in found if name not in expected]
    if missing:
        raise DataMismatch(
            f"The data has no array for input(s) {missing}: expected {expected}, found {found}.",
            hint=_NPZ_HINT,
        )
    if extra:
        raise DataMismatch(
            f"The data has array(s) {extra} that are not model inputs: expected {expected}, "
            f"found {found}.",
            hint="Remove the extra arrays or rename them to the model's input names.",
        )


def _check_member(member: ArrayHeader, spec: TensorSpec) -> None:
    if member.dtype != np.dtype(spec.dtype):
        raise DataMismatch(
            f"Input {spec.name!r} expects dtype {spec.dtype} but the data is {member.dtype}.",
            hint=f"Convert it before saving: array.astype('{spec.dtype}').",
        )
    expected = ["samples", *(_dim_text(dim) for dim in spec.shape[1:])]
    fits = len(member.shape) == len(spec.shape) and all(
        not isinstance(dim, int) or dim <= 0 or dim == size
        for dim, size in zip(spec.shape[1:], member.shape[1:], strict=True)
    )
    if not fits:
        raise DataMismatch(
            f"Input {spec.name!r} expects shape {expected} but the data has shape "
            f"{list(member.shape)}.",
            hint="The first axis holds the samples; the others must match the model's dims.",
        )


def _dim_text(dim: int | str | None) -> int | str:
    return dim if isinstance(dim, int) and dim > 0 else (dim or "?")


def _common_samples(members: dict[str, ArrayHeader], inputs: list[TensorSpec]) -> int:
    counts = {spec.name: members[spec.name].shape[0] for spec in inputs}
    if len(set(counts.values())) > 1:
        raise DataMismatch(
            f"The inputs have different sample counts: {counts}.",
            hint="Every array needs the same length along its first axis.",
        )
    samples = next(iter(counts.values()), 0)
    if samples == 0:
        raise DataMismatch("The dataset is empty: it has no samples.", hint=_NPZ_HINT)
    return samples


def _npy_labels(path: Path) -> np.ndarray:
    try:
        with path.open("rb") as stream:
            header = npy_header(stream, path.name)
        if len(header.shape) != 1:
            raise DataMismatch(
                f"Labels must be a 1-D array of class ids, not shape {list(header.shape)}."
            )
        check_budget([header])
        array = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise DataMismatch(f"Cannot read labels from {path.name!r}: {exc}.") from exc
    return _as_int_labels(array)


def _as_int_labels(array: np.ndarray) -> np.ndarray:
    if np.issubdtype(array.dtype, np.integer):
        return array.astype(np.int64)
    numeric = np.issubdtype(array.dtype, np.floating)
    if not numeric or not np.all(np.isfinite(array)) or np.any(array != np.round(array)):
        raise DataMismatch(
            f"Labels must be integer class ids; got dtype {array.dtype} with non-integer values."
        )
    return array.astype(np.int64)


def _csv_labels(path: Path) -> np.ndarray:
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            rows = [row for row in csv.reader(handle) if row and any(cell.strip() for cell in row)]
    except (OSError, UnicodeDecodeError) as exc:
        raise DataMismatch(f"Cannot read labels from {path.name!r}: {exc}.") from exc
    has_header = bool(rows) and not _is_int(rows[0][0])
    column = _label_column(rows.pop(0)) if has_header else 0
    labels = [_parse_label(row, column, entry) for entry, row in enumerate(rows, 1)]
    return np.array(labels, dtype=np.int64)


def _label_column(header: list[str]) -> int:
    names = [cell.strip().lower() for cell in header]
    if "label" not in names:
        raise DataMismatch(
            f"The labels CSV header has no 'label' column (columns: {header}).",
            hint="Name the column 'label', or give one integer per line without a header.",
        )
    return names.index("label")


def _parse_label(row: list[str], column: int, entry: int) -> int:
    text = row[column].strip() if column < len(row) else ""
    if not _is_int(text):
        raise DataMismatch(f"Label {entry} ({text!r}) is not an integer class id.")
    return int(text)


def _is_int(text: str) -> bool:
    try:
        int(text.strip())
    except ValueError:
        return False
    return True
