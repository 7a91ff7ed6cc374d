"""Why a part of the bundle was not made, as one sentence a person reads: what could not be
done, then the library's own words (with the kind of error when those words alone are bare, as
numpy's "axes don't match array" is), ending in a full stop."""

from __future__ import annotations

BARE_WORDS = 12
"""A library message of at most this many words and no sentence of its own is shown with the
kind of error it came with."""


def sentence(what: str, detail: str, *, kind: str | None = None) -> str:
    """'What could not be done: the detail.' The detail is cut to its first line; `kind` (an
    exception's class name) is added when the detail is bare ("axes don't match array
    (ValueError)"); an empty detail leaves `what` alone. `what` starts as given (tool names
    such as onnx2tf and coremltools are written in lower case)."""
    lines = (detail or "").strip().splitlines()
    line = lines[0].strip().rstrip(".") if lines else ""
    if not line:
        return _closed(what)
    if kind and _bare(line) and kind not in line:
        line = f"{line} ({kind})"
    return _closed(f"{what}: {line}")


def _bare(line: str) -> bool:
    return len(line.split()) <= BARE_WORDS and not line[:1].isupper()


def _closed(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else f"{text}."
