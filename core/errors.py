"""The errors a person may see.

`OptistudioError` and its subclasses are *expected* failures: a bad file, a backend that is not
installed, a cancelled run. Their message is written for the user and may carry a hint (what to
try next). Anything else that escapes the engine is a bug and keeps its traceback.
"""

from __future__ import annotations

from pydantic import ValidationError


class OptistudioError(Exception):
    """Base of every expected, user-facing failure."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} {self.hint}" if self.hint else self.message


class ModelRejected(OptistudioError):
    """The uploaded file is not a model we can accept (not ONNX, truncated, too big, unsafe)."""


class ModelLoadError(OptistudioError):
    """A backend could not load a model that passed intake."""


class InferenceFailed(OptistudioError):
    """The runtime loaded the model but could not run it on the given inputs."""


class PassFailed(OptistudioError):
    """An optimization pass cannot handle this model (unsupported op, calibration failed...)."""


class DataMismatch(OptistudioError):
    """Calibration or accuracy data does not fit the model (names, shapes, dtypes, lengths)."""


class InvalidSpec(OptistudioError):
    """A job or benchmark specification is inconsistent with the model."""


class UnknownName(OptistudioError):
    """A registry lookup missed; the message lists the valid names."""


class BackendUnavailable(OptistudioError):
    """The backend is registered but cannot run here (not installed, no device)."""


class Cancelled(OptistudioError):
    """The run was stopped because its job was cancelled."""


def describe_validation_error(exc: ValidationError) -> str:
    """'field: problem; other.field: problem' from a pydantic error, for people."""
    return "; ".join(
        f"{'.'.join(map(str, error['loc'])) or 'settings'}: {error['msg']}"
        for error in exc.errors()
    )


def first_line(exc: BaseException, *, limit: int = 400) -> str:
    """The first line of a library's error message (runtimes append pages of context)."""
    text = str(exc).strip()
    return text.splitlines()[0][:limit] if text else type(exc).__name__
