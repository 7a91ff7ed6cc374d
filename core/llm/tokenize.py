"""A text as a decoder's token ids: its own tokenizer, or ids the user tokenized.

A `.txt` is read as UTF-8 and encoded with the `tokenizer.json` beside the model (the fast
tokenizer file Optimum and ONNX Runtime GenAI's builder write) through the `tokenizers`
package, imported only here and only when a text is encoded. A `.npy` holds token ids already
(any integer array, read in order). Without either, the refusal says in one sentence what the
model lacks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from optistudio.core.data.npy_headers import checked_npy_header
from optistudio.core.errors import DataMismatch

TOKENIZER_FILE = "tokenizer.json"
IDS_SUFFIX = ".npy"
TEXT_HINT = (
    "Put the tokenizer.json the exporter wrote beside the model, or tokenize the text "
    "yourself and save the ids: np.save('ids.npy', ids)."
)


def tokenizer_beside(model: Path) -> Path | None:
    """The tokenizer.json beside the model, None when there is none."""
    found = model.parent / TOKENIZER_FILE
    return found if found.is_file() else None


def can_tokenize(model: Path) -> bool:
    """Whether a text can be encoded for `model`: a tokenizer.json and the package to read it."""
    return tokenizer_beside(model) is not None and _tokenizers() is not None


def encode(text: str, model: Path, *, what: str = "the text") -> np.ndarray:
    """The token ids [N] of `text` by the tokenizer beside `model`; DataMismatch in one
    sentence when it has none or the tokenizers package is missing."""
    file = tokenizer_beside(model)
    if file is None:
        raise DataMismatch(
            f"The decoder's folder has no {TOKENIZER_FILE}, so {what} cannot be turned into its "
            f"tokens: give the folder with {TOKENIZER_FILE}, or token ids as .npy.",
            hint=TEXT_HINT,
        )
    package = _tokenizers()
    if package is None:
        raise DataMismatch(
            f"Reading {TOKENIZER_FILE} needs the tokenizers package, which is not installed: "
            "pip install tokenizers, or give token ids as .npy.",
            hint=TEXT_HINT,
        )
    try:
        tokenizer = package.Tokenizer.from_file(str(file))
    except Exception as exc:  # the Rust side raises plain Exceptions
        raise DataMismatch(f"{file.name} could not be read as a tokenizer: {exc}.") from exc
    return np.asarray(tokenizer.encode(text).ids, dtype=np.int64)


def text_ids(path: Path, model: Path) -> tuple[np.ndarray, str]:
    """The token ids of the user's file (a .txt encoded for `model`, or a .npy of ids) and
    how they were made."""
    if path.suffix.lower() == IDS_SUFFIX:
        return _npy_ids(path), f"token ids from {path.name}"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataMismatch(
            f"{path.name} could not be read as UTF-8 text ({exc}).",
            hint="Give a .txt file, or token ids as .npy.",
        ) from None
    return encode(text, model, what=path.name), f"{path.name} tokenized by {TOKENIZER_FILE}"


def check_vocabulary(ids: np.ndarray, vocab: int | None, source: str) -> None:
    """DataMismatch when an id falls outside the model's vocabulary of `vocab` ids."""
    if vocab is None or ids.size == 0:
        return
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab:
        raise DataMismatch(
            f"The token ids of {source} run from {low} to {high}, but the model's vocabulary "
            f"holds ids 0 to {vocab - 1}.",
            hint="Tokenize with the model's own tokenizer.",
        )


def _npy_ids(path: Path) -> np.ndarray:
    header = checked_npy_header(path)  # a bomb or an .npz is refused before any byte is loaded
    if not np.issubdtype(header.dtype, np.integer):
        raise DataMismatch(
            f"{path.name} holds {header.dtype} values, not token ids.",
            hint="Save the ids as integers: np.save('ids.npy', np.asarray(ids, dtype=np.int64)).",
        )
    try:
        ids = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DataMismatch(f"{path.name} could not be read as a .npy array ({exc}).") from None
    return np.asarray(ids, dtype=np.int64).reshape(-1)


def _tokenizers() -> Any | None:
    try:
        import tokenizers
    except ImportError:
        return None
    return tokenizers
