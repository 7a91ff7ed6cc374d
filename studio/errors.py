"""How the studio shows an error: the message, then what to try, then its code, small.

Every page that shows a failed, timed-out or cancelled job, or refuses an action with an
`OptistudioError`, goes through `show_error`. `shown_error` is its plain part, which tests call
without Streamlit. Jobs stored before error codes have no code and a message that still ends
with the hint; they are shown as they always were.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

import streamlit as st

from optistudio.core.errors import ErrorInfo, OptistudioError
from optistudio.studio.job_view import JobView

Tone = Literal["error", "warning", "caption"]
TONE_OF_STATUS: dict[str, Tone] = {"timed_out": "warning", "cancelled": "caption"}
"""How a finished job's status is drawn; any other status (failed) is an error box."""

ErrorSource: TypeAlias = ErrorInfo | OptistudioError | JobView[Any]
"""An error, its stored fields, or a job (its message, error hint and code, and status)."""


@dataclass(frozen=True)
class ShownError:
    """What the page draws: a box of `tone` holding `body`, then `code` in small print."""

    tone: Tone
    message: str
    what_to_try: str | None
    code: str | None

    @property
    def body(self) -> str:
        if not self.what_to_try:
            return self.message
        return f"{self.message}\n\n**What to try:** {self.what_to_try}"


def shown_error(source: ErrorSource, *, prefix: str = "", tone: Tone | None = None) -> ShownError:
    """The parts of `source` to show; `prefix` goes before the message ("Job #4 failed: ")."""
    if isinstance(source, OptistudioError):
        source = source.info()
    if isinstance(source, ErrorInfo):
        message, hint, code, status = source.message, source.hint, source.code.value, "failed"
    else:
        message, hint = source.message, source.error_hint
        code, status = source.error_code, source.status
    return ShownError(
        tone=tone or TONE_OF_STATUS.get(status, "error"),
        message=f"{prefix}{message}",
        what_to_try=hint or None,
        code=code or None,
    )


def show_error(
    source: ErrorSource, *, prefix: str = "", tone: Tone | None = None, where: Any = None
) -> None:
    """Draw `source` (in the container `where`, else the page) as `shown_error` describes."""
    shown = shown_error(source, prefix=prefix, tone=tone)
    where = where if where is not None else st
    getattr(where, shown.tone)(shown.body)
    if shown.code:
        where.caption(f"code: `{shown.code}`")
