"""Whether an accuracy report meets a budget, and why, in words.

A budget is either generic (`AccuracyBudget`: mean cosine against the original's judged output
and top-1 drop, or disagreement without labels) or in a task's terms (`TaskBudget`: limits by
metric name, each metric's direction deciding which side passes). Every verdict keeps the
numeric floor (`numeric_floor`: each float output's worst-sample SNR), which no task metric
overrides; NaN or Inf in the variant's outputs always fails.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.errors import InvalidSpec
from optistudio.core.numerics.accuracy_report import GENERIC_METRICS, AccuracyReport
from optistudio.core.numerics.evaluators.base import EvaluatorInfo, MetricInfo
from optistudio.core.numerics.numeric_floor import FLOOR_SNR_DB, all_constant, check_floor
from optistudio.core.numerics.tolerances import floor_for


class AccuracyBudget(BaseModel):
    """How much accuracy an optimization may cost; None switches a check off."""

    model_config = ConfigDict(extra="forbid")

    max_top1_drop: float | None = Field(
        default=0.01,
        ge=0,
        le=1,
        description="Largest allowed top-1 accuracy drop (0.01 = 1 point). Without labels the "
        "top-1 disagreement with the original is used, an upper bound on the drop.",
    )
    min_cosine: float | None = Field(
        default=0.99,
        ge=-1,
        le=1,
        description="Smallest allowed mean cosine similarity to the original's first output.",
    )
    floor_snr_db: float | None = Field(
        default=FLOOR_SNR_DB,
        le=100,
        description="The numeric floor: the smallest worst-sample SNR (dB) of every float "
        "output against the original's, kept whatever the task's metrics say "
        "(optistudio.core.numerics.numeric_floor); None switches it off, for models whose "
        "outputs vary from run to run.",
    )


@dataclass(frozen=True)
class TaskBudget:
    """A budget in a task's terms: limits by metric name (each metric's direction decides
    which side passes), checked against the task's metrics and the generic ones."""

    task: EvaluatorInfo
    limits: dict[str, float]
    defaulted: bool = False
    """The limits are the task's defaults (the user set none)."""

    def metric(self, name: str) -> MetricInfo:
        """The metric a limit names; InvalidSpec naming the valid ones if the task has none."""
        for metric in (*self.task.metrics, *GENERIC_METRICS):
            if metric.name == name:
                return metric
        valid = ", ".join(m.name for m in (*self.task.metrics, *GENERIC_METRICS))
        raise InvalidSpec(
            f"The {self.task.label} task has no metric {name!r}. Its metrics: {valid}.",
            hint="Name one of them in the budget, e.g. "
            f"{next(iter(self.task.default_budget), 'mean_cosine')}=LIMIT.",
        )

    def check(self) -> TaskBudget:
        """Itself, once every limit names a metric (InvalidSpec otherwise)."""
        for name in self.limits:
            self.metric(name)
        return self


def within_budget(
    report: AccuracyReport,
    budget: AccuracyBudget,
    task: TaskBudget | None = None,
    *,
    precision: str | None = None,
) -> tuple[bool, str]:
    """Whether a report meets a budget, and why, in words (NaN/Inf always fails). Every verdict
    keeps the numeric floor (each float output's worst-sample SNR, `numeric_floor`), which no
    task metric overrides; for a variant computing in `precision` ('bf16', 'int8+bf16') the
    floor is that precision's rule where it is stricter than the budget's
    (`optistudio.core.numerics.tolerances`, the rule bench's output check holds too). With a `task` budget and a report judged in that task its limits
    decide, not cosine and top-1, unless the task's metrics cannot judge this model
    (`numeric_reason`): then the cosine budget decides and the task's metrics stand beside."""
    failures: list[str] = []
    passes: list[str] = []
    if report.nan_or_inf:
        failures.append(f"the candidate produced NaN/Inf ({report.nonfinite_values} values)")
    floor_db, rule = floor_for(precision, budget.floor_snr_db)
    floor_passes, floor_failures = check_floor(report.output_floors, floor_db, rule)
    failures += floor_failures
    in_task = task is not None and report.task == task.task.name
    numeric = numeric_reason(report, task)
    if task is not None and in_task and not numeric:
        _check_task(report, task, passes, failures)
    else:
        void = bool(report.task_void) or all_constant(report.constant_outputs, report.output_floors)
        _check_generic(report, budget, passes, failures, top1=not void)
    passes += floor_passes
    said = [f"judged numerically: {numeric}{_beside(report, task if in_task else None)}"]
    said = said if numeric else []
    if failures:
        return False, "over budget: " + "; ".join(failures + said)
    return True, "within budget: " + ("; ".join(passes + said) or "no checks enabled")


def numeric_reason(report: AccuracyReport, task: TaskBudget | None) -> str:
    """Why the task's metrics cannot judge this report's model, so that the numbers do (the
    original's outputs constant or tied, or a task recognized with low confidence and no
    limits set by the user); '' when they can."""
    if all_constant(report.constant_outputs, report.output_floors):
        return (
            "the original's outputs are the same for every input, so no task metric means anything"
        )
    if report.task_void:
        return report.task_void
    low = report.task_confidence == "low" and task is not None and task.defaulted
    if low and task is not None and report.task == task.task.name:
        return (
            f"{task.task.label} was recognized with low confidence, so the output cosine and "
            "the numeric floor decide"
        )
    return ""


def _beside(report: AccuracyReport, task: TaskBudget | None) -> str:
    """'; the task's metrics beside it: string_agreement 97.00% (limit 99.00%)' or ''."""
    if task is None:
        return ""
    shown = []
    for name, limit in task.limits.items():
        metric, value = task.metric(name), report.metric(name)
        if value is not None:
            shown.append(f"{name} {_shown(value, metric)} (limit {_shown(limit, metric)})")
    return f"; the task's metrics beside it, not deciding: {', '.join(shown)}" if shown else ""


def _check_task(
    report: AccuracyReport, budget: TaskBudget, passes: list[str], failures: list[str]
) -> None:
    for name, limit in budget.limits.items():
        metric = budget.metric(name)
        value = report.metric(name)
        if value is None:
            if budget.defaulted or metric.needs_labels:
                passes.append(f"{name} not measured ({_why_unmeasured(metric)})")
            else:
                failures.append(f"{name} not measured ({_why_unmeasured(metric)})")
            continue
        ok = metric.passes(value, limit)
        (passes if ok else failures).append(
            f"{name} {_shown(value, metric)} {metric.sign(ok)} {_shown(limit, metric)}"
        )


def _why_unmeasured(metric: MetricInfo) -> str:
    return "it needs labels" if metric.needs_labels else "this run could not measure it"


def _shown(value: float, metric: MetricInfo) -> str:
    if metric.unit == "fraction":
        return f"{value:.2%}"
    if metric.unit == "points":
        return f"{value * 100:.2f} points"
    return f"{value:.5g}"


def _check_generic(
    report: AccuracyReport,
    budget: AccuracyBudget,
    passes: list[str],
    failures: list[str],
    *,
    top1: bool = True,
) -> None:
    if budget.min_cosine is not None:
        ok = report.mean_cosine >= budget.min_cosine
        sign = ">=" if ok else "<"
        (passes if ok else failures).append(
            f"mean cosine {report.mean_cosine:.5f} {sign} {budget.min_cosine}"
        )
    if budget.max_top1_drop is not None and top1:
        _check_top1(report, budget.max_top1_drop, passes, failures)
    elif budget.max_top1_drop is not None:
        passes.append("top-1 not checked (the original's own outputs tie or never change)")


def _check_top1(
    report: AccuracyReport, limit: float, passes: list[str], failures: list[str]
) -> None:
    if report.top1_drop is not None:
        drop, what = report.top1_drop, "top-1 drop"
    elif report.top1_agreement is not None:
        drop, what = 1 - report.top1_agreement, "top-1 disagreement (no labels; bounds the drop)"
    elif report.output_role != "classifier" and report.output:
        passes.append(
            f"top-1 not checked ({report.output} is not a classifier's output: it looks like "
            f"{'an embedding' if report.output_role == 'embedding' else 'another kind'})"
        )
        return
    else:
        passes.append("top-1 not checked (the judged output is not [batch, classes])")
        return
    ok = drop <= limit
    sign = "<=" if ok else ">"
    (passes if ok else failures).append(f"{what} {drop:.2%} {sign} {limit:.2%}")
