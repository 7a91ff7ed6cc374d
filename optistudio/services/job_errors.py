"""A job's error as the jobs table stores it: core's `ErrorInfo` to columns and back.

The row keeps the message in `message` (also a success's or progress's text), the code and the
hint in `error_code` and `error_hint`, a bug's traceback in `error_detail`. Rows from before
error codes have no code, and their message still ends with the hint.
"""

from __future__ import annotations

from typing import Any

from optistudio.core.errors import ErrorCode, ErrorInfo
from optistudio.db.models import Job, JobStatus

_CODES = {code.value for code in ErrorCode}


def error_columns(error: ErrorInfo) -> dict[str, Any]:
    """`optistudio.db.queries.finish_job`'s keyword arguments that record `error`."""
    return {
        "message": error.message,
        "error_code": error.code.value,
        "error_hint": error.hint,
        "error_detail": error.detail,
    }


def job_error(job: Job) -> ErrorInfo | None:
    """The error a finished job stored; None while it runs or once it succeeded.

    A row with no code (stored before codes) or an unknown one reads as `failed`."""
    if not job.is_terminal or job.status is JobStatus.succeeded:
        return None
    code = job.error_code if job.error_code in _CODES else ErrorCode.failed
    return ErrorInfo(code=code, message=job.message, hint=job.error_hint, detail=job.error_detail)
