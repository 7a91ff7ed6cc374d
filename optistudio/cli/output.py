"""What a command prints on stdout: with --json, exactly one JSON document and nothing else.

While a --json command runs, `json_stdout` sends everything else that would reach stdout to
stderr: Python's `sys.stdout` (NNCF's logger, progress bars, a library's print) and file
descriptor 1 itself (C and C++ code: OpenVINO, ONNX Runtime). The command's document goes
through `print_json` to the stdout the process was started with. Without --json nothing changes.
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

_document: TextIO | None = None
"""Where `print_json` writes while `json_stdout` holds stdout; None: `sys.stdout`."""


def print_json(payload: Any) -> None:
    """The command's JSON document, on the real stdout."""
    stream = _document or sys.stdout
    stream.write(json.dumps(payload, indent=2, default=str) + "\n")
    stream.flush()


@contextmanager
def json_stdout(enabled: bool) -> Iterator[None]:
    """While the block runs, only `print_json` reaches stdout; the rest goes to stderr."""
    global _document
    if not enabled:
        yield
        return
    sys.stdout.flush()
    saved, kept_fd = sys.stdout, os.dup(1)
    own = _on_fd_1(saved)
    _document = open(kept_fd, "w", encoding="utf-8", closefd=False) if own else saved  # noqa: SIM115
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stderr.flush()
        _document.flush()
        if own:
            _document.close()
        os.dup2(kept_fd, 1)
        os.close(kept_fd)
        sys.stdout, _document = saved, None


def _on_fd_1(stdout: TextIO) -> bool:
    """Whether `stdout` writes to fd 1 (else it is a test's capture, which still reaches the
    reader after fd 1 points at stderr)."""
    try:
        return stdout.fileno() == 1
    except (AttributeError, OSError, io.UnsupportedOperation):
        return False
