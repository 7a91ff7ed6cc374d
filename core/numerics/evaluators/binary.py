"""Binary classification: a one-logit (or one-probability) head judged by its decisions.

The judged output holds one value per sample, [N] or [N, 1]: a probability after a Sigmoid, or
a logit from a linear head (Gemm, MatMul, MatMul + bias) that a deployment passes through one.
Weighed as evidence (`evidence`): after a Sigmoid STRONG; from a linear head WEAK (a
regressor's value looks the same: `regression` weighs it too, and DNSMOS P.808's MOS read as
binary above low with MODERATE); a name like 'logit' or 'prob' adds WEAK support after a Sigmoid
and MODERATE to a linear head's bare value, one like 'value' or 'variable' WEAK evidence against; an image, token or
audio input WEAK support. Judged by the decisions at 0.5 (`thresholds`): with flips counted per
sample,

    flip_rate       = samples whose decision flipped / samples    (default budget: <= 0.05)
    clear_flip_rate = the same, leaving out near-ties              (default budget: <= 0.01)

a near-tie being a sample whose original probability is within 0.05 of 0.5 (the
classification rule: its two classes within 0.1). With labels (0 / 1 per sample) each model's
accuracy and the drop (default budget with labels: accuracy_drop <= 0.01).
"""

from __future__ import annotations

from typing import Any

from optistudio.core.numerics.evaluators.base import (
    Case,
    EvaluatorInfo,
    MetricInfo,
    OutputFacts,
    Recognition,
    TaskScore,
    TaskTally,
)
from optistudio.core.numerics.evaluators.evidence import MODERATE, STRONG, WEAK, Evidence
from optistudio.core.numerics.evaluators.outputs import (
    REGRESSION_WORDS,
    WeighedEvaluator,
    is_float,
    linear_head,
    made_by,
    named_like,
    shape_text,
    size,
)
from optistudio.core.numerics.evaluators.thresholds import ThresholdTally

METRICS = [
    MetricInfo(
        name="flip_rate",
        label="Decision flips",
        higher_is_better=False,
        description="Fraction of samples whose decision at 0.5 is not the original's.",
    ),
    MetricInfo(
        name="clear_flip_rate",
        label="Decision flips beyond near-ties",
        higher_is_better=False,
        description="Fraction of samples whose decision flipped where the original's "
        "probability was at least 0.05 from 0.5.",
    ),
    MetricInfo(
        name="accuracy_reference",
        label="Accuracy (original)",
        higher_is_better=True,
        needs_labels=True,
        description="Fraction of samples whose original decision is the label.",
    ),
    MetricInfo(
        name="accuracy_candidate",
        label="Accuracy (variant)",
        higher_is_better=True,
        needs_labels=True,
        description="Fraction of samples whose variant decision is the label.",
    ),
    MetricInfo(
        name="accuracy_drop",
        label="Accuracy drop",
        higher_is_better=False,
        unit="points",
        needs_labels=True,
        description="Original minus variant accuracy (0.01 = 1 point).",
    ),
]


def _one_value(output: OutputFacts) -> bool:
    shape = output.shape
    return len(shape) == 1 or (len(shape) == 2 and size(shape[1]) == 1)


def _why_not(output: OutputFacts) -> str | None:
    return None if _one_value(output) else "a binary classifier gives one value per sample"


def _binary_case(task: str, output: OutputFacts) -> Case | None:
    if not (is_float(output) and _one_value(output)):
        return None
    shape = shape_text(output.shape, "N")
    if output.producer == "Sigmoid":
        weight, reason = STRONG, f"{output.name} {shape} after Sigmoid: one probability per sample"
    elif linear_head(output):  # one value from a linear head: a logit or a score alike
        weight = WEAK
        reason = f"{output.name} {shape} after {made_by(output)}: one logit per sample"
    else:
        return None
    evidence = [Evidence(kind="structure", weight=weight, text=reason)]
    if named_like(output, "logit", "prob", "class", "binary"):  # the name settles a bare value
        named = WEAK if output.producer == "Sigmoid" else MODERATE
        evidence.append(Evidence(kind="name", weight=named, text=f"named {output.name!r}"))
    elif named_like(output, *REGRESSION_WORDS):
        text = f"named {output.name!r}, like a value"
        evidence.append(Evidence(kind="name", weight=-WEAK, text=text))
    recognition = Recognition(
        task=task, reason=f"{reason}: a binary classifier", outputs=[output.name]
    )
    return Case(recognition=recognition, evidence=evidence)


class BinaryEvaluator(WeighedEvaluator):
    """Decisions at 0.5 of a one-logit head: flips, near-ties apart; accuracy with labels."""

    why_not = staticmethod(_why_not)
    case = staticmethod(_binary_case)

    def tally(self, recognition: Recognition, labels: Any | None = None) -> TaskTally:
        return BinaryTally(self.info.name, recognition.outputs[:1], labels)


class BinaryTally(ThresholdTally):
    """Per-sample decisions (`thresholds`), the binary metrics picked."""

    def score(self) -> TaskScore:
        if self.samples == 0:
            return self.finished({})
        rates = self.rates()
        metrics = {name: rates[name] for name in ("flip_rate", "clear_flip_rate")}
        return self.scored(metrics | self.accuracy())


BINARY = EvaluatorInfo(
    name="binary",
    label="Binary classification",
    description="Judges a one-logit (or one-probability) classifier by its decision at 0.5: the "
    "fraction of samples whose decision flipped, and of those beyond near-ties (the original's "
    "probability within 0.05 of 0.5); with 0 / 1 labels each model's accuracy and the drop.",
    metrics=METRICS,
    default_budget={"clear_flip_rate": 0.01, "flip_rate": 0.05},
    labels_budget={"accuracy_drop": 0.01},
    implementation="optistudio.core.numerics.evaluators.binary:BinaryEvaluator",
    priority=65,
    input_kinds=("image", "tokens", "audio"),
)
