"""The model card's input profile as an editable table, and the table back as a profile."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from optistudio.core.data.profile import InputProfile, edited_profile
from optistudio.core.errors import InvalidSpec
from optistudio.core.model.info import ModelInfo

NO_BATCH = "none"
COLUMNS = ["input", "dtype", "declared", "shape", "batch axis", "value", "how it was set"]


def profile_rows(profile: InputProfile, info: ModelInfo) -> pd.DataFrame:
    """One row per input: its declared shape, the profile's full shape ("1, 3, 48, 320"), its
    batch axis ("0", or "none"), its fixed value ("" = generated data) and which of its sizes
    were guessed and why."""
    rows = []
    for spec in info.inputs:
        axis = profile.batch_axes.get(spec.name)
        notes = [
            f"dim {key.rpartition('.')[2]}: {why}"
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
                "value": "" if value is None else f"{value:g}",
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
    values: dict[str, float] = {}
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
        if text:
            try:
                values[name] = float(text)
            except ValueError:
                raise InvalidSpec(
                    f"Value of {name!r} must be a number, not {text!r}.",
                    hint="Leave it empty to feed generated data.",
                ) from None
    return edited_profile(info.inputs, shapes=shapes, batch_axes=axes, values=values, before=before)


def _sizes(name: str, text: str) -> list[int]:
    parts = [part.strip() for part in text.replace("x", ",").split(",") if part.strip()]
    try:
        return [int(part) for part in parts]
    except ValueError:
        raise InvalidSpec(
            f"Shape of {name!r} must be sizes separated by commas, not {text!r}.",
            hint="For example 1, 3, 48, 320 (empty for a scalar).",
        ) from None
