"""The errors a person may see.

`OptistudioError` and its subclasses are *expected* failures: a bad file, a backend that is not
installed, a cancelled run. Each keeps three fields apart: `message` (written for the user),
`hint` (what to try next, optional) and `code` (what kind of failure, one per subclass, from the
closed set `ErrorCode`). `info()` gives them as the `ErrorInfo` that job rows store and every
front end shows; `str(exc)` glues message and hint for logs only. Anything else that escapes the
engine is a bug and keeps its traceback.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class ErrorCode(str, Enum):
    """What kind of failure an error is. Stored on job rows, so a value never changes."""

    failed = "failed"
    model_rejected = "model_rejected"
    model_load_failed = "model_load_failed"
    inference_failed = "inference_failed"
    pass_failed = "pass_failed"
    data_mismatch = "data_mismatch"
    outputs_differ = "outputs_differ"
    invalid_spec = "invalid_spec"
    unknown_name = "unknown_name"
    backend_unavailable = "backend_unavailable"
    queue_full = "queue_full"
    pipeline_closed = "pipeline_closed"
    no_worker = "no_worker"
    artifact_store_failed = "artifact_store_failed"
    timeout = "timeout"
    cancelled = "cancelled"
    worker_lost = "worker_lost"
    broker_unavailable = "broker_unavailable"
    database_unavailable = "database_unavailable"
    internal = "internal"


class ErrorInfo(BaseModel):
    """An error as a job row stores it and the studio and CLI show it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    code: ErrorCode = Field(description="What kind of failure (a stable string).")
    message: str = Field(description="What went wrong, written for the user.")
    hint: str | None = Field(default=None, description="What to try next, when we know.")
    detail: str | None = Field(
        default=None, description="A traceback for developers; kept in the row, never shown."
    )


class OptistudioError(Exception):
    """Base of every expected, user-facing failure."""

    code: ErrorCode = ErrorCode.failed

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        """Message and hint on one line, for logs; what is stored or shown uses `info()`."""
        return f"{self.message} {self.hint}" if self.hint else self.message

    def info(self) -> ErrorInfo:
        """The error's fields, as stored on a job row."""
        return ErrorInfo(code=self.code, message=self.message, hint=self.hint)


class ModelRejected(OptistudioError):
    """The uploaded file is not a model we can accept (not ONNX, truncated, too big, unsafe)."""

    code = ErrorCode.model_rejected


class ModelLoadError(OptistudioError):
    """A backend could not load a model that passed intake."""

    code = ErrorCode.model_load_failed


class InferenceFailed(OptistudioError):
    """The runtime loaded the model but could not run it on the given inputs."""

    code = ErrorCode.inference_failed


class PassFailed(OptistudioError):
    """An optimization pass cannot handle this model (unsupported op, calibration failed...)."""

    code = ErrorCode.pass_failed


class DataMismatch(OptistudioError):
    """Calibration or accuracy data does not fit the model (names, shapes, dtypes, lengths)."""

    code = ErrorCode.data_mismatch


class OutputsDiffer(OptistudioError):
    """Two models meant to compute the same thing return outputs that cannot be compared (a
    variant that holds another number of values per sample than its original): the variant's or
    the runtime's doing, not the user's data or settings."""

    code = ErrorCode.outputs_differ


class InvalidSpec(OptistudioError):
    """A job or benchmark specification is inconsistent with the model."""

    code = ErrorCode.invalid_spec


class UnknownName(OptistudioError):
    """A registry lookup missed; the message lists the valid names."""

    code = ErrorCode.unknown_name


class BackendUnavailable(OptistudioError):
    """The backend is registered but cannot run here (not installed, no device)."""

    code = ErrorCode.backend_unavailable


class QueueFull(OptistudioError):
    """The pipeline's queue holds max_queue requests; the new one is refused (backpressure)."""

    code = ErrorCode.queue_full


class PipelineClosed(OptistudioError):
    """The pipeline is shutting down and takes no new requests."""

    code = ErrorCode.pipeline_closed


class NoWorkerForTarget(OptistudioError):
    """No live worker offers the backend and device a job asks for."""

    code = ErrorCode.no_worker


class ArtifactStoreError(OptistudioError):
    """The artifact store could not be reached or refused a request."""

    code = ErrorCode.artifact_store_failed


class TimedOut(OptistudioError):
    """The run went past its time limit and was stopped."""

    code = ErrorCode.timeout


class Cancelled(OptistudioError):
    """The run was stopped because its job was cancelled."""

    code = ErrorCode.cancelled


def error_from(info: ErrorInfo) -> OptistudioError:
    """The error `info` describes, to raise again (e.g. a job's stored failure in the CLI).

    Codes with no class of their own (`internal`, `worker_lost`, ...) give the base class
    carrying that code.
    """
    kind = next((cls for cls in _subclasses(OptistudioError) if cls.code is info.code), None)
    error = (kind or OptistudioError)(info.message, hint=info.hint)
    error.code = info.code
    return error


def _subclasses(cls: type[OptistudioError]) -> list[type[OptistudioError]]:
    return [sub for direct in cls.__subclasses__() for sub in [direct, *_subclasses(direct)]]


def describe_validation_error(exc: ValidationError) -> str:
    """'field: problem; other.field: problem' from a pydantic error, for people."""
    return "; ".join(
        f"{'.'.join(map(str, error['loc'])) or 'settings'}: {error['msg']}"
        for error in exc.errors()
    )


def first_line(exc: BaseException, *, limit: int = 400) -> str:
    """The first line of a library's error message (runtimes append pages of context).

    A database driver's own error is read through SQLAlchemy's wrapper (`exc.orig`)."""
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0][:limit] if text else type(exc).__name__
