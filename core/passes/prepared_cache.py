"""The graphs prepared for the quantizer, kept for the rest of the process.

One optimization run quantizes the same model several times on ONNX Runtime's quantizer (static
INT8 with each calibration method, INT8 placed where it pays, mixed precision), and each pass
prepared it anew: in one Auto run of a PP-OCR detector it was prepared three times, 15.5 s of
`quant_pre_process` (symbolic shape inference) in all, 8.1 s once kept. The prepared graph depends
only on the model's bytes and how it was prepared, so the first pass's is copied for the
others (a copy each: passes write beside it). Models with external data are prepared each
time (their weights are outside the file whose bytes name the entry).

The same holds for onnxslim's simplification, the first step of nearly every recipe: an Auto
run on the PP-OCR recognizer simplified the same file six times, 14.3 s in all (`SIMPLIFIED`).
"""

from __future__ import annotations

import atexit
import hashlib
import shutil
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

ENTRIES = 4
"""Prepared graphs kept per process (oldest dropped first): one run's model, and a few more."""
LARGEST_BYTES = 1 << 28
"""Files above this (256 MiB) are prepared each time: each cache's kept copies stay under 1 GiB
of temporary disk."""


class Prepared(NamedTuple):
    """The graph to quantize and what was done to get it (notes for the variant)."""

    path: Path
    notes: list[str]
    details: dict[str, Any] | None = None
    """What the pass reports of the graph it made, where it reports more than notes."""


Key = tuple[str, tuple[Any, ...]]


class PreparedCache:
    """Prepared graphs by (the model file's SHA-256, how it was prepared: a tuple of the
    settings that change the result)."""

    def __init__(self, entries: int = ENTRIES) -> None:
        self.entries = entries
        self._kept: OrderedDict[Key, Prepared] = OrderedDict()
        self._lock = threading.Lock()
        self._folder: Path | None = None
        self.hits = 0

    def prepared(
        self,
        model: Path,
        work_dir: Path,
        how: tuple[Any, ...],
        prepare: Callable[[], Prepared],
        *,
        external: bool,
    ) -> Prepared:
        """What `prepare` makes of `model` in `work_dir`: made once per key, copied after (a
        model with `external` data is prepared each time)."""
        key = None if external else _key(model, how)
        if key is None:
            return prepare()
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None:
                self._kept.move_to_end(key)
                self.hits += 1
                return _handed_out(kept, _copy(kept.path, work_dir))
        made = prepare()
        with self._lock:
            self._keep(key, made)
        return made

    def clear(self) -> None:
        """Forget every prepared graph (and how many were handed out again)."""
        with self._lock:
            for key in list(self._kept):
                self._drop(key)
            self.hits = 0

    def _keep(self, key: Key, made: Prepared) -> None:
        if key in self._kept:
            return
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="optistudio-prepared-"))
            atexit.register(shutil.rmtree, self._folder, True)
        entry = Path(tempfile.mkdtemp(dir=self._folder))
        self._kept[key] = _handed_out(made, _copy(made.path, entry))
        while len(self._kept) > self.entries:
            self._drop(next(iter(self._kept)))

    def _drop(self, key: Key) -> None:
        shutil.rmtree(self._kept.pop(key).path.parent, ignore_errors=True)


def _handed_out(made: Prepared, path: Path) -> Prepared:
    """`made` at `path`, with notes and details of its own (a caller may change them)."""
    details = None if made.details is None else dict(made.details)
    return Prepared(path, list(made.notes), details)


def _key(model: Path, how: tuple[Any, ...]) -> Key | None:
    """The entry's key, or None for a model too large to keep."""
    if model.stat().st_size > LARGEST_BYTES:
        return None
    digest = hashlib.sha256()
    with model.open("rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest(), how


def _copy(path: Path, folder: Path) -> Path:
    """`path` and its external data file (`NAME.data`, as the pre-processing writes it) copied
    into `folder`; the copy's path."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / path.name
    shutil.copyfile(path, target)
    data = path.with_name(f"{path.name}.data")
    if data.exists():
        shutil.copyfile(data, folder / data.name)
    return target


PREPARED = PreparedCache()
"""This process's prepared graphs (optistudio.core.passes.prepare.prepare_for_quantizer)."""
SIMPLIFIED = PreparedCache()
"""This process's simplified graphs (optistudio.core.passes.graph.run_simplify)."""
