"""How the command line reports an expected failure, for every command alike.

The message and the hint go to stderr on lines of their own; with --json, stdout also gets the
one JSON document the command owes, {"error": {"code", "message", "hint"}}. The exit code is 2.
"""

from __future__ import annotations

import sys
from typing import Any

from optistudio.cli.output import print_json
from optistudio.core.errors import ErrorInfo, OptistudioError, error_from

EXIT_REFUSED = 2


def report_error(error: ErrorInfo, *, as_json: bool = False) -> int:
    """Print `error` for a person (stderr) and, with `as_json`, for a program (stdout)."""
    print(f"error: {error.message}", file=sys.stderr)
    if error.hint:
        print(f"hint: {error.hint}", file=sys.stderr)
    if as_json:
        shown = error.model_dump(mode="json", include={"code", "message", "hint"})
        print_json({"error": shown})
    return EXIT_REFUSED


def job_failure(job: Any, job_id: int) -> OptistudioError:
    """The error a job that did not succeed stored, to raise again; `job` may be None (gone)."""
    from optistudio.services.job_errors import job_error

    error = job_error(job) if job is not None else None
    return error_from(error) if error else OptistudioError(f"Job {job_id} vanished.")
