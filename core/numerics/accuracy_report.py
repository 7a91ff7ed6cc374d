"""What an accuracy check reports: the variant's outputs against the original's, in numbers
and in its task's terms, and the metrics every run measures whatever its task.

Built by `output_tally` (the running sums over batches) and `accuracy.accuracy_report` (which
adds the task's score); judged by `accuracy.within_budget`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.numerics.evaluators.base import Disagreement, MetricInfo
from optistudio.core.numerics.evaluators.evidence import Confidence
from optistudio.core.numerics.numeric_floor import OutputFloor, all_constant, constant_warning

SYNTHETIC_NOTE = "synthetic inputs: accuracy means agreement with the original, not task accuracy"
BUILTIN_NOTE = "built-in samples, not your data: agreement with the original on real inputs; "
UNLABELLED_NOTE = "no labels: top-1 is agreement with the original model, not task accuracy"
LABELLED_NOTE = "top-1 accuracy measured against the given labels"


GENERIC_METRICS = (
    MetricInfo(
        name="mean_cosine",
        label="Mean cosine",
        higher_is_better=True,
        unit="ratio",
        description="Per-sample cosine of the judged output to the original's, averaged.",
    ),
    MetricInfo(
        name="min_cosine",
        label="Worst cosine",
        higher_is_better=True,
        unit="ratio",
        description="The worst sample's cosine of the judged output to the original's.",
    ),
    MetricInfo(
        name="max_abs_error",
        label="Largest abs. error",
        higher_is_better=False,
        unit="value",
        description="Largest |original - variant| over every output element.",
    ),
    MetricInfo(
        name="mean_abs_error",
        label="Mean abs. error",
        higher_is_better=False,
        unit="value",
        description="Mean |original - variant| over every output element.",
    ),
)
"""Metrics every run measures, whatever its task: a budget may name them too."""
GENERIC_METRIC_NAMES = frozenset(metric.name for metric in GENERIC_METRICS)


class AccuracyReport(BaseModel):
    """The candidate's outputs compared with the reference's on the same inputs."""

    model_config = ConfigDict(extra="forbid")

    samples: int = Field(description="Samples compared (samples fed, on the inputs' batch axis).")
    data: Literal["synthetic", "user", "builtin"] = Field(
        description="Where the inputs came from: random, the user's, or built-in samples."
    )
    max_abs_error: float = Field(description="Largest |reference - candidate| over all outputs.")
    output: str = Field(default="", description="The output that cosine and top-1 judge.")
    output_role: Literal["classifier", "embedding", "other"] = Field(
        default="other",
        description="What the judged output looks like from the graph: top-1 is judged only for "
        "a classifier's output (or with labels).",
    )
    candidate_backend: str = Field(
        default="onnxruntime", description="Backend the candidate ran on."
    )
    candidate_precision: str = Field(
        default="fp32", description="Inference precision the candidate ran at, e.g. bf16."
    )
    mean_abs_error: float = Field(description="Mean |reference - candidate| over all elements.")
    mean_cosine: float = Field(description="Per-sample cosine of the first output, averaged.")
    min_cosine: float = Field(description="The worst sample's cosine of the first output.")
    top1_agreement: float | None = Field(
        default=None,
        description="Fraction of samples whose argmax over the last axis agrees; None when the "
        "first output is not [batch, classes].",
    )
    top1_accuracy_reference: float | None = Field(
        default=None, description="Top-1 accuracy of the reference against the labels."
    )
    top1_accuracy_candidate: float | None = Field(
        default=None, description="Top-1 accuracy of the candidate against the labels."
    )
    top1_drop: float | None = Field(
        default=None, description="Reference minus candidate top-1 accuracy (0.01 = 1 point)."
    )
    per_output_max_abs_error: dict[str, float] = Field(
        description="Largest absolute error of each output, by the reference's output names."
    )
    nan_or_inf: bool = Field(description="The candidate produced NaN or Inf: always a failure.")
    nonfinite_values: int = Field(default=0, description="How many NaN/Inf output elements.")
    note: str = Field(default="", description="How to read these numbers.")
    task: str | None = Field(
        default=None, description="The task the variant was judged in (an evaluator's name)."
    )
    task_reason: str = Field(default="", description="Why that task: the outputs it read.")
    task_mode: str | None = Field(
        default=None, description="agreement (with the original) or labels (against them)."
    )
    task_metrics: dict[str, float] = Field(
        default_factory=dict, description="The task's metrics by name (see its evaluator)."
    )
    task_note: str = Field(
        default="",
        description="How the task's evaluator read the outputs (their layout, what it "
        "assumed) and what it counted.",
    )
    output_floors: dict[str, OutputFloor] = Field(
        default_factory=dict,
        description="Each output's worst-sample SNR and cosine against the original's, the "
        "numeric floor no task metric overrides (optistudio.core.numerics.numeric_floor); empty "
        "on reports stored before it.",
    )
    constant_outputs: list[str] = Field(
        default_factory=list,
        description="The outputs the original gave the same values for on every sample, while "
        "the inputs differed.",
    )
    task_confidence: Confidence | None = Field(
        default=None,
        description="How sure recognition was of the task (None: set by the user, or none).",
    )
    task_void: str = Field(
        default="",
        description="Why the task's metrics say nothing about this model (its own outputs tie "
        "on most samples); '' when they judge.",
    )
    worst: list[Disagreement] = Field(
        default_factory=list,
        description="The samples where the variant and the original disagree most.",
    )

    def metric(self, name: str) -> float | None:
        """A metric by name: the task's, or a generic one (mean_cosine, min_cosine,
        max_abs_error, mean_abs_error); None when this run did not measure it."""
        if name in self.task_metrics:
            return self.task_metrics[name]
        if name in GENERIC_METRIC_NAMES:
            value = getattr(self, name)
            return float(value) if value is not None else None
        return None


def constant_notes(reports: Iterable[AccuracyReport | None]) -> list[str]:
    """The run's warning when the original's outputs were the same for every input in a check
    (every variant's is the same original on the same data, so the first says it); []
    otherwise."""
    for report in reports:
        if report is not None and all_constant(report.constant_outputs, report.output_floors):
            return [constant_warning(report.constant_outputs, report.samples)]
    return []
