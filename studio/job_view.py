"""A job as the studio reads it: `JobView`, one frozen value per row, generic over its result.

`optistudio.studio.jobs_services.job_view` makes it where rows come in (the Jobs page's
`job_rows`, every other page's `recent_jobs`), so a page reads `job.status` and `job.result`
(the kind's own result model) instead of a dict's keys. Plain values only: no Streamlit, no
database session, so a view can keep it after its session closed and a test can build one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

ResultT = TypeVar("ResultT")

ACTIVE = ("queued", "running")
"""The statuses of a job not finished yet."""


@dataclass(frozen=True)
class JobView(Generic[ResultT]):
    """A job row: its id, kind (the label the pages call it), model, status (`JobStatus`'s
    value), progress (0..1), message and error fields, whether a cancel was asked, its times,
    worker and attempts, the spec it stored, and its typed result (None while it has none, on
    the Jobs page, or when a stored result no longer reads)."""

    id: int
    kind: str
    status: str
    model: str = ""
    model_id: int | None = None
    progress: float = 0.0
    message: str = ""
    error_code: str | None = None
    error_hint: str | None = None
    cancel_requested: bool = False
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    worker: str = ""
    attempts: int = 0
    spec: Mapping[str, Any] = field(default_factory=dict)
    result: ResultT | None = None

    @property
    def active(self) -> bool:
        """Queued or running: not finished yet."""
        return self.status in ACTIVE

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"
