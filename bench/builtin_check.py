"""The built-in-samples mode of bench/accuracy_judges.py: Auto as a user without data gets it,
then every variant judged again on the case's own data, the confirmation the user would give.

With --builtin the optimize run gets no data: the variants are judged on built-in samples
(optistudio.core.data.builtin) at the data's sample sizes, the INT8 ones calibrated on other
built-in samples, and Auto chooses as it does for such a user. `on_data` then runs each made
variant and the original on the case's data (its labels too) with the task's judge and budget,
exactly as a run given that data judges, and says whether the variant holds there; `pick_line`
says it for Auto's pick. A variant that passes on built-in samples and fails on the real data is
what "give data to confirm" guards against.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from optistudio.core.data.inputs import sample_dims
from optistudio.core.model.intake import inspect_model
from optistudio.core.numerics.accuracy import accuracy_report, within_budget
from optistudio.core.optimize.run import OptimizeSpec, TaskChoice, VariantResult, task_judge

Case = Any
"""An accuracy_judges.Case (typed loosely: that script imports this module)."""

LABEL = "on the case's data: within budget"
_JUDGES: dict[str, TaskChoice] = {}


def builtin_spec(case: Case, spec: OptimizeSpec) -> OptimizeSpec:
    """The run's spec with the case data's sample sizes as dims (built-in samples at them)."""
    first = next(iter(case.data.batches()))
    dims = sample_dims(inspect_model(case.path).inputs, first)
    return spec.model_copy(update={"dims": dims})


def with_builtin(case: Case) -> None:
    """The case as a run without data makes it, with a last column: the variant on the data."""
    before, label = case.extra, case.extra_label
    case.builtin, case.extra_label = True, f"{label} | {LABEL}".strip(" |")

    def both(case: Case, variant: VariantResult) -> str:
        mine = on_data(case, variant)
        return f"{before(case, variant)} | {mine}" if before else mine

    case.extra = both


def on_data(case: Case, variant: VariantResult) -> str:
    """'yes (string_agreement 99.50% >= 99.00%)' or 'NO (...)': the variant judged on the
    case's data by the task's budget, as a run given that data would judge it."""
    if variant.path is None:
        return "-"
    choice = _judge(case)
    report = accuracy_report(
        case.path,
        Path(variant.path),
        case.data,
        output=case.output,
        candidate_backend=variant.backend,
        judge=choice.judge,
        candidate_precision=variant.recipe.precision or "fp32",
    )
    ok, note = within_budget(report, OptimizeSpec().budget, choice.budget)
    return f"{'yes' if ok else 'NO'} ({note.split(': ', 1)[-1]})"


def pick_line(case: Case, pick: VariantResult | None) -> str:
    """Auto's pick on built-in samples and whether it holds on the case's data."""
    if pick is None:
        return "Auto kept FP32 on built-in samples (nothing to confirm)"
    held = on_data(case, pick)
    word = "holds" if held.startswith("yes") else "does NOT hold"
    return (
        f"Auto's pick on built-in samples {pick.recipe.name} ({pick.builtin_samples}) {word} "
        f"on the case's data: {held}"
    )


def _judge(case: Case) -> TaskChoice:
    """The task's judge and budget for the case's data (read once per case)."""
    if case.name not in _JUDGES:
        spec = OptimizeSpec(budgets=case.budgets, accuracy_output=case.output)
        _JUDGES[case.name] = task_judge(case.path, spec, case.data, case.labels_file)
    return _JUDGES[case.name]
