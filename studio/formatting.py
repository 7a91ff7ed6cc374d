"""Numbers and tables as people read them: binary sizes, SI counts, headers and empty cells.

Every table a page shows goes through `readable_frame`: a missing value reads "—" (Streamlit
draws None as the word "None"), a list reads as prose ("batch, height, width"), and a raw
field name becomes a header ("p50_ms" -> "p50 (ms)", "mean_queue_ms" -> "mean queue (ms)").
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import pandas as pd

EMPTY = "—"
"""What a cell without a value shows."""
UNIT_SUFFIXES = {
    "ms": "ms",
    "us": "µs",
    "s": "s",
    "mb": "MB",
    "mib": "MiB",
    "gb": "GB",
    "bytes": "bytes",
    "pct": "%",
}
"""Field name endings that are units: 'offset_s' -> 'offset (s)'."""
_QUOTED_ITEM = r"""(?:'[^']*'|"[^"]*")"""
_PY_LIST = re.compile(rf"\[\s*({_QUOTED_ITEM}(?:\s*,\s*{_QUOTED_ITEM})*)\s*\]")
"""A Python list of strings written into a message: ['batch', 'height']."""
_ITEM = re.compile(r"(['\"])(.*?)\1")


def human_bytes(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def human_count(value: float | None) -> str:
    """1234 -> '1.23 K', 4.2e9 -> '4.20 G'; None -> 'unknown'."""
    if value is None:
        return "unknown"
    for factor, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= factor:
            return f"{value / factor:.2f} {suffix}"
    return f"{value:,.0f}"


def header(name: str) -> str:
    """A field name as a column header: 'p50_ms' -> 'p50 (ms)', 'boxes_per_frame' -> 'boxes
    per frame'; a header already written for people ('p50 (ms)', 'top-1 drop') stays."""
    if "_" not in name or " " in name:
        return name
    words = name.split("_")
    unit = UNIT_SUFFIXES.get(words[-1]) if len(words) > 1 else None
    text = " ".join(words[:-1] if unit else words)
    return f"{text} ({unit})" if unit else text


def prose(text: str) -> str:
    """Python list text inside a sentence as words: "dynamic dims ['batch', 'height']" ->
    'dynamic dims batch, height' (a shape such as [1, 3, 224, 224] stays as it is)."""
    return _PY_LIST.sub(
        lambda match: ", ".join(text for _, text in _ITEM.findall(match.group(1))), text
    )


def cell(value: Any, number: str | None = None) -> Any:
    """A value as its table cell: '—' for None or NaN, prose for a list or a dict, the number
    formatted by `number` ('{:.2f}x') when given; other values as they are."""
    if _missing(value):
        return EMPTY
    if isinstance(value, bool):
        return value
    if isinstance(value, datetime):
        return f"{value:%Y-%m-%d %H:%M:%S}"
    if isinstance(value, list | tuple | set):
        return ", ".join(str(cell(item)) for item in value) or EMPTY
    if isinstance(value, Mapping):
        return ", ".join(f"{key}={cell(item)}" for key, item in value.items()) or EMPTY
    if isinstance(value, str):
        return prose(value)
    if number is not None and isinstance(value, int | float):
        return number.format(value)
    return value


def _missing(value: Any) -> bool:
    return value is None or value is pd.NaT or (isinstance(value, float) and math.isnan(value))


def readable_frame(
    rows: Iterable[Mapping[str, Any]] | pd.DataFrame,
    *,
    numbers: Mapping[str, str] | None = None,
    columns: list[str] | None = None,
    keep: Iterable[str] = (),
    headers: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """A table people read: readable headers, '—' for missing values, lists as prose.

    `numbers` formats columns by their field name ('speedup': '{:.2f}x'); a column that holds
    only numbers keeps them as numbers (so it sorts and takes the page's number format) unless
    it misses some; `keep` names columns left exactly as they are (a checkbox, a progress);
    `headers` names columns whose header is not their field name read out ('cer': 'CER')."""
    frame = rows.copy() if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    if columns is not None:
        frame = frame.reindex(columns=columns)
    numbers, kept = dict(numbers or {}), set(keep)
    for column in frame.columns:
        if column in kept:
            continue
        values = frame[column].tolist()
        if _whole_numbers(values) and column not in numbers:
            continue
        frame[column] = pd.Series(
            [cell(value, numbers.get(column)) for value in values], index=frame.index, dtype=object
        )
    named = dict(headers or {})
    return frame.rename(
        columns={c: named.get(c) or header(str(c)) for c in frame.columns if c not in kept}
    )


def _whole_numbers(values: list[Any]) -> bool:
    """Numbers in every cell (no None, NaN or text): such a column is left numeric."""
    return bool(values) and all(
        isinstance(v, int | float) and not isinstance(v, bool) and not _missing(v) for v in values
    )


UPLOAD_NOTE = "[data-testid='stFileUploaderDropzoneInstructions']"


def upload_limit_style(max_upload_mb: int) -> str:
    """CSS that replaces the size every uploader states with the true limit. Streamlit rounds
    a limit above half a unit up to the next unit with no decimals, so 512 MB reads "1GB per
    file"; its own text (the size and the types) is hidden and this says "Up to 512 MB per
    file" in its place (each uploader's label and help name the types it takes)."""
    return (
        f"<style>{UPLOAD_NOTE} span {{display: none;}} "
        f"{UPLOAD_NOTE} > div::after {{content: 'Up to {int(max_upload_mb)} MB per file';}}"
        "</style>"
    )
