"""An optimize job as the Optimize and Results pages read it: `OptimizeRun`, the job (a
`JobView` with its typed result) and what the pages draw from it, made once per stored run
by `optistudio.studio.optimize_services.optimization_runs`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from optistudio.core.errors import ErrorInfo
from optistudio.services.jobresults import OptimizeJobResult
from optistudio.studio.job_view import JobView


@dataclass(frozen=True)
class OptimizeRun:
    """A finished optimize job: the job itself, its message without the headline it ends with
    (shown apart), the data it was judged on, a table row per variant (free-form: one column
    per figure, `variants_table` shows them), the failed variants' errors, the recipes set
    aside, notes, what its data says about your data, the inputs it was timed on, its task's
    line, name, metrics and the reasons it was read so, where variants disagree most, and
    whether it is a decoder's run."""

    job: JobView[OptimizeJobResult]
    message: str
    headline: str
    data: str
    variants: list[dict[str, Any]]
    failures: list[tuple[str, ErrorInfo]]
    not_applicable: list[str]
    notes: list[str]
    not_your_data: str
    inputs: str
    task: str
    task_name: str | None
    task_metrics: list[str]
    task_reasons: list[str]
    drilldown: list[dict[str, Any]]
    decoder: bool

    @property
    def id(self) -> int:
        return self.job.id

    @property
    def model(self) -> str:
        return self.job.model
