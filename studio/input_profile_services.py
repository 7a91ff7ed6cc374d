"""The model card's input profile as an editable table, and the table back as a profile.

A value is a number, or a small array: the table shows an array as 'array float32 [2, 1, 16]'
(kept as it is when saved again), and a row's `upload` (the bytes of an .npz from the card's
uploader) sets one.
"""

from __future__ import annotations

import io
import logging
import math
import zipfile
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pandas as pd

from optistudio.core.batching.fixed_batch import fixed_at_one
from optistudio.core.data.input_profile import BATCH_KEY, InputProfile, edited_input_profile
from optistudio.core.data.inputs import (
    MAX_VALUE_ELEMENTS,
    SUPPORTED_DTYPES,
    ArrayValue,
    InputValue,
)
from optistudio.core.data.npy_headers import ArrayHeader, npz_headers
from optistudio.core.errors import DataMismatch, InvalidSpec
from optistudio.core.model.flops import estimate_flops
from optistudio.core.model.info import ModelInfo, TensorSpec
from optistudio.core.report.symbolic_dims import SymbolicDims, ellipsized
from optistudio.studio.formatting import readable_frame

log = logging.getLogger(__name__)

NO_BATCH = "none"
ARRAY = "array"
"""How the table's value cell starts for an array value."""
COLUMNS = ["input", "dtype", "declared", "shape", "batch axis", "value", "how it was set"]


def batch_axis_choices(spec: TensorSpec) -> list[str]:
    """What the card's batch-axis box offers an input: 'none' and each of its axes."""
    return [NO_BATCH, *(str(axis) for axis in range(len(spec.shape)))]


def profile_rows(profile: InputProfile, info: ModelInfo) -> pd.DataFrame:
    """One row per input: its declared shape, the profile's full shape ("1, 3, 48, 320"), its
    batch axis ("0", or "none"), its fixed value ("" = generated data) and which of its sizes
    were guessed and why."""
    rows = []
    for spec in info.inputs:
        axis = profile.batch_axes.get(spec.name)
        notes = [
            _guess_note(key.rpartition(".")[2], why)
            for key, why in profile.guessed.items()
            if key.rpartition(".")[0] == spec.name
        ]
        if spec.name in profile.guessed:
            notes.append(f"value {profile.guessed[spec.name]}")
        value = profile.values.get(spec.name)
        rows.append(
            {
                "input": spec.name,
                "dtype": spec.dtype,
                "declared": "[" + ", ".join("?" if d is None else str(d) for d in spec.shape) + "]",
                "shape": ", ".join(str(size) for size in profile.shapes.get(spec.name, [])),
                "batch axis": NO_BATCH if axis is None else str(axis),
                "value": _value_text(value),
                "how it was set": "; ".join(notes) or "chosen",
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS)


def profile_from_rows(
    rows: Iterable[Mapping[str, Any]], info: ModelInfo, *, before: InputProfile
) -> InputProfile:
    """The profile a user typed into the table, checked against the model's inputs."""
    shapes: dict[str, list[int]] = {}
    axes: dict[str, int | None] = {}
    values: dict[str, InputValue] = {}
    for row in rows:
        name = str(row["input"])
        shapes[name] = _sizes(name, str(row.get("shape") or ""))
        axis = str(row.get("batch axis") or NO_BATCH).strip().lower()
        if axis != NO_BATCH and not axis.isdigit():
            raise InvalidSpec(
                f"Batch axis of {name!r} must be an axis number or 'none', not {axis!r}."
            )
        axes[name] = None if axis == NO_BATCH else int(axis)
        text = str(row.get("value") or "").strip()
        kept = before.values.get(name)
        if row.get("upload"):
            values[name] = array_from_npz(name, row["upload"])
        elif text.startswith(ARRAY) and isinstance(kept, ArrayValue):
            values[name] = kept
        elif text:
            try:
                values[name] = float(text)
            except ValueError:
                raise InvalidSpec(
                    f"Value of {name!r} must be a number, not {text!r}.",
                    hint="Leave it empty to feed generated data.",
                ) from None
    return edited_input_profile(
        info.inputs, shapes=shapes, batch_axes=axes, values=values, before=before
    )


def tensor_table(tensors: list[TensorSpec], dims: SymbolicDims) -> pd.DataFrame:
    """The card's inputs or outputs: name, dtype and a shape a person can read; a long symbolic
    dim is written as its placeholder (`dims.legend()` has the full text) and a long shape is
    cut with an ellipsis."""
    return readable_frame(
        {"name": t.name, "dtype": t.dtype, "shape": ellipsized(dims.shape(t.shape))}
        for t in tensors
    )


def cut_shapes(tensors: list[TensorSpec], dims: SymbolicDims) -> pd.DataFrame:
    """The tensors whose written shape the card cut, with the shape whole."""
    written = [(t.name, dims.shape(t.shape)) for t in tensors]
    return readable_frame(
        {"name": name, "shape": shape} for name, shape in written if ellipsized(shape) != shape
    )


def symbolic_legend(dims: SymbolicDims) -> pd.DataFrame:
    """Each placeholder a shape on the card uses, with the expression it stands for."""
    return readable_frame(
        {"dim": short, "stands for": full} for short, full in dims.legend().items()
    )


@dataclass(frozen=True)
class BatchNote:
    """What the card says about the batch: whether jobs may sweep it, and why not."""

    dynamic: bool
    fixed: int | None
    """The declared batch when every input fixes it (1 for most exports), else None."""
    freeable: bool
    """A batch fixed at 1 that the dynamic_batch rewrite can free (the batching jobs do)."""

    @property
    def caption(self) -> str:
        if self.dynamic:
            return "the batch axis takes the batch sizes"
        if self.freeable:
            return (
                "batch fixed at 1 by the model, so the benchmark runs at batch 1; make it "
                "dynamic below (a checked rewrite with a free batch)"
            )
        return f"batch fixed at {self.fixed or 'its declared size'} by the model"


def batch_note(info: ModelInfo, batch_axes: dict[str, int | None] | None = None) -> BatchNote:
    """The batch as the model declares it (dim 0 of its inputs), and whether it can be freed."""
    leading = [t.shape[0] for t in info.inputs if t.shape]
    dynamic = any(not isinstance(size, int) for size in leading)
    fixed = leading[0] if leading and not dynamic and len(set(leading)) == 1 else None
    return BatchNote(dynamic, fixed, not dynamic and fixed_at_one(info, batch_axes))


def profile_flops(model_path: Path | None, profile: InputProfile) -> int | None:
    """FLOPs of one sample at the input profile's shapes (intake's estimate sets every dynamic
    dim to 1, which says nothing of a 48x320 text line), or None when they cannot be counted."""
    if model_path is None or not profile.shapes:
        return None
    shapes = {name: tuple(shape) for name, shape in profile.shapes.items()}
    try:
        model = onnx.load(str(model_path), load_external_data=False)
        return estimate_flops(model, input_shapes=shapes)
    except Exception:  # an estimate must never break the card; keep the traceback in the log
        log.exception("FLOPs at the profile's shapes failed for %s", model_path)
        return None


def array_from_npz(name: str, data: bytes) -> ArrayValue:
    """The array named `name` (or the only array) of an uploaded .npz, as a fixed value.

    Headers are read first: an array a fixed value cannot hold (more than MAX_VALUE_ELEMENTS
    elements, a dtype it does not store) is refused before any array is loaded, and only the
    chosen one is loaded then."""
    stream = io.BytesIO(data)
    try:
        headers = npz_headers(stream, f"The file for {name!r}")
    except DataMismatch as exc:
        raise InvalidSpec(exc.message, hint=exc.hint) from None
    if name not in headers and len(headers) != 1:
        raise InvalidSpec(
            f"The .npz for {name!r} holds {sorted(headers)}, none named {name!r}.",
            hint=f"Save the array under the input's name: np.savez('value.npz', {name}=array).",
        )
    header = headers.get(name) or next(iter(headers.values()))
    _check_value_header(name, header)
    return ArrayValue.of(name, _member_array(stream, header, name))


def _check_value_header(name: str, header: ArrayHeader) -> None:
    """InvalidSpec, from its header, for an array a fixed value cannot hold."""
    elements = math.prod(header.shape)
    if elements > MAX_VALUE_ELEMENTS:
        raise InvalidSpec(
            f"The array {header.name!r} for input {name!r} declares shape {list(header.shape)} "
            f"({elements:,} elements); a fixed value holds at most {MAX_VALUE_ELEMENTS:,}.",
            hint="Give larger arrays to each job as an inputs file (--inputs FILE.npz).",
        )
    if header.dtype.name not in SUPPORTED_DTYPES:
        raise InvalidSpec(
            f"The array {header.name!r} for input {name!r} is {header.dtype}; a fixed value is "
            f"one of {', '.join(SUPPORTED_DTYPES)}.",
            hint="Convert it before saving: array.astype(...) in the input's dtype.",
        )


def _member_array(stream: io.BytesIO, header: ArrayHeader, name: str) -> np.ndarray:
    try:
        with zipfile.ZipFile(stream) as archive, archive.open(f"{header.name}.npy") as member:
            return np.lib.format.read_array(member, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise InvalidSpec(
            f"The file for {name!r} is not a readable .npz: {exc}.",
            hint=f"Save one with np.savez('value.npz', {name}=array).",
        ) from None


def _value_text(value: InputValue | None) -> str:
    if value is None:
        return ""
    if isinstance(value, ArrayValue):
        return f"{ARRAY} {value.dtype} {value.shape}"
    return f"{value:g}"


def _guess_note(part: str, why: str) -> str:
    return f"batch {why}" if part == BATCH_KEY else f"dim {part}: {why}"


def _sizes(name: str, text: str) -> list[int]:
    parts = [part.strip() for part in text.replace("x", ",").split(",") if part.strip()]
    try:
        return [int(part) for part in parts]
    except ValueError:
        raise InvalidSpec(
            f"Shape of {name!r} must be sizes separated by commas, not {text!r}.",
            hint="For example 1, 3, 48, 320 (empty for a scalar).",
        ) from None
