"""Classification: a variant judged by the class it picks for each sample.

The judged output holds scores [N, C] (C > 1 classes), made by a Softmax / LogSoftmax / Sigmoid
or a linear head (Gemm, MatMul, MatMul + bias), or scikit-learn's ZipMap. Weighed as evidence
(`evidence`): a ZipMap, or a softmax on the class axis (any but the batch axis 0; also one
written as Exp / ReduceSum / Div), is STRONG; a linear head over more than FEW_VALUES classes
MODERATE; a Sigmoid (a probability per label: `multilabel` reads it), a linear head of
FEW_VALUES or fewer values (a regressor's as much as a classifier's: `regression` reads it) or a
softmax over the batch axis WEAK. A name
like logits / prob / class adds WEAK support, one like embedding MODERATE evidence against;
label names in the metadata count WEAK for (one per class) or against (another count); an image,
token or audio input counts WEAK support. For sample i with the original's scores r_i and the
variant's c_i, top1(x) = argmax x and top5(x) the five largest:

    top1_agreement    = mean_i [top1(c_i) == top1(r_i)]
    top1_disagreement = 1 - top1_agreement           (the default budget: <= 0.05)
    clear_top1_disagreement = mean_i [top1(c_i) != top1(r_i) and gap(r_i) >= NEAR_TIE]
                                                     (the default budget: <= 0.01)
    top5_agreement    = mean_i [top1(r_i) in top5(c_i)]     (C >= 5: the original's pick is
                                                             still among the variant's five)

With labels y_i (class ids in [0, C)), each model's accuracy and the drop, in points (a fraction:
0.01 is one point; negative when the variant does better):

    top1_accuracy_m = mean_i [top1(m_i) == y_i],   top1_drop = top1_accuracy_reference
                                                              - top1_accuracy_candidate
    top5_drop       = mean_i [y_i in top5(r_i)] - mean_i [y_i in top5(c_i)]

where gap(r) is the original's probability of its top class minus that of its second (the
softmax of the row when it does not hold probabilities). A flip on a near-tie (gap < NEAR_TIE)
says little: the original itself all but split the sample, so by its own probabilities the
flip moves the chance of a right answer by less than NEAR_TIE. The default budget lets such
flips pass up to 5 % of the samples and clear ones up to 1 %, so by the original's
probabilities the expected top-1 loss stays within 1 + 0.1 x 5 = 1.5 points.

An original whose own top two are exactly equal (gap <= 1e-6) on most samples leaves top-1 to
rounding: every variant "agrees" with it, so the score says it is void (`near_ties`) and the
numbers judge instead.

Without labels, top1_disagreement bounds the drop from above: a sample can only lose its label
where the two disagree. Budgets with labels are set on top1_drop (the integrator's choice).
The drill-down lists the samples whose top-1 flipped, the original's most confident first;
the confidence shown is the output's value when a row holds probabilities (all in [0, 1]),
else the softmax of the row (a row with NaN or Inf ranks as confidence 1).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from optistudio.core.numerics.evaluators.base import (
    Case,
    Disagreement,
    EvaluatorInfo,
    MetricInfo,
    ModelFacts,
    OutputFacts,
    Recognition,
    TaskScore,
    TaskTally,
)
from optistudio.core.numerics.evaluators.evidence import MODERATE, STRONG, WEAK, Evidence
from optistudio.core.numerics.evaluators.label_metadata import label_evidence
from optistudio.core.numerics.evaluators.near_ties import (
    EXACT_TIE,
    NEAR_TIE,
    top_two_gaps,
    void_by_ties,
)
from optistudio.core.numerics.evaluators.outputs import (
    FEW_VALUES,
    WeighedEvaluator,
    made_by,
    named_like,
    on_last_axis,
    output_role,
    shape_text,
    size,
    strongest,
)
from optistudio.core.numerics.evaluators.tallying import BaseTally, check_rank, class_ids, pair

TOP5 = 5
PROBABILITIES = frozenset({"Softmax", "LogSoftmax"})
CLASS_WORDS = ("logit", "prob", "class", "softmax")

METRICS = [
    MetricInfo(
        name="top1_agreement",
        label="Top-1 agreement",
        higher_is_better=True,
        description="Fraction of samples whose top-1 class is the original's.",
    ),
    MetricInfo(
        name="top1_disagreement",
        label="Top-1 disagreement",
        higher_is_better=False,
        description="1 - top-1 agreement: the fraction of samples whose top-1 class flipped; "
        "an upper bound on the accuracy drop when there are no labels.",
    ),
    MetricInfo(
        name="clear_top1_disagreement",
        label="Top-1 flips beyond near-ties",
        higher_is_better=False,
        description=f"The fraction of samples whose top-1 class flipped where the original "
        f"was clear: its top class at least {NEAR_TIE:g} more probable than its second.",
    ),
    MetricInfo(
        name="top5_agreement",
        label="Top-5 agreement",
        higher_is_better=True,
        description="Fraction of samples whose original top-1 class is among the variant's "
        "five highest scores (models with 5 classes or more).",
    ),
    MetricInfo(
        name="top1_accuracy_reference",
        label="Top-1 accuracy (original)",
        higher_is_better=True,
        needs_labels=True,
        description="Fraction of samples whose original top-1 class is the label.",
    ),
    MetricInfo(
        name="top1_accuracy_candidate",
        label="Top-1 accuracy (variant)",
        higher_is_better=True,
        needs_labels=True,
        description="Fraction of samples whose variant top-1 class is the label.",
    ),
    MetricInfo(
        name="top1_drop",
        label="Top-1 accuracy drop",
        higher_is_better=False,
        unit="points",
        needs_labels=True,
        description="Original minus variant top-1 accuracy (0.01 = 1 point).",
    ),
    MetricInfo(
        name="top5_drop",
        label="Top-5 accuracy drop",
        higher_is_better=False,
        unit="points",
        needs_labels=True,
        description="Original minus variant top-5 accuracy (models with 5 classes or more).",
    ),
]


def _why_not(output: OutputFacts) -> str | None:
    if output.dtype in ("sequence", "map"):
        return None if output.producer == "ZipMap" else "it is not a tensor of class scores"
    if len(output.shape) != 2:
        return "class scores are [N, C]"
    classes = size(output.shape[1])
    return "it has a single class" if classes == 1 else None


class ClassificationEvaluator(WeighedEvaluator):
    """Top-1 / top-5 agreement with the original, accuracy and its drop with labels."""

    why_not = staticmethod(_why_not)

    def weigh(self, facts: ModelFacts) -> Case | None:
        return strongest(
            _classifier_case(self.info.name, output, facts) for output in facts.outputs
        )

    def tally(self, recognition: Recognition, labels: Any | None = None) -> TaskTally:
        return ClassificationTally(recognition.outputs[0], labels)


def _classifier_case(task: str, output: OutputFacts, facts: ModelFacts) -> Case | None:
    """The case for `output` as a classifier's scores (module docstring), or None when its
    shape or its producer says nothing for it."""
    if output.producer == "ZipMap":
        reason = (
            f"{output.name} is scikit-learn's ZipMap ({{class: probability}} per sample): "
            "a classifier"
        )
        return _case(task, output, reason, [Evidence(kind="structure", weight=STRONG, text=reason)])
    classes = size(output.shape[1]) if len(output.shape) == 2 else None
    head = _head(output) if classes is not None and classes >= 2 else None
    if head is None:
        return None
    shape = shape_text(output.shape, "NC")
    axis = " on the last axis" if on_last_axis(output) else ""
    reason = f"{output.name} {shape} after {made_by(output)}{axis}: a classifier's scores"
    evidence = [Evidence(kind="structure", weight=head[0], text=f"{output.name} {shape} {head[1]}")]
    evidence += _name_evidence(output) + label_evidence(facts, classes)
    return _case(task, output, f"{reason} over {classes} classes", evidence)


def _head(output: OutputFacts) -> tuple[float, str] | None:
    """The weight and words of what made the output, when a classifier's head makes it."""
    if output.producer in PROBABILITIES:
        axis = output.producer_axis
        if axis is None:
            return MODERATE, f"after {made_by(output)} over axes read at run time"
        if axis == 0:  # over the batch
            return WEAK, f"after {made_by(output)} on axis 0, across the samples"
        return STRONG, f"after {made_by(output)} on the class axis: probabilities"
    if output_role(output) != "classifier":
        return None
    if output.producer == "Sigmoid":
        return WEAK, "after Sigmoid: a probability per label more than a choice of one class"
    classes = size(output.shape[1]) if len(output.shape) == 2 else None
    if classes is not None and classes <= FEW_VALUES:
        return (
            WEAK,
            f"after {made_by(output)}: {classes} values, a classifier's logits or a "
            "regressor's values",
        )
    return MODERATE, f"after {made_by(output)}: a linear head's logits"


def _name_evidence(output: OutputFacts) -> list[Evidence]:
    if named_like(output, "embed"):
        return [Evidence(kind="name", weight=-MODERATE, text="named as an embedding")]
    if named_like(output, *CLASS_WORDS):
        return [Evidence(kind="name", weight=WEAK, text=f"named {output.name!r}, like scores")]
    return []


def _case(task: str, output: OutputFacts, reason: str, evidence: list[Evidence]) -> Case:
    recognition = Recognition(task=task, reason=reason, outputs=[output.name])
    return Case(recognition=recognition, evidence=evidence)


class ClassificationTally(BaseTally):
    """Counts of agreeing and correct samples; the flipped samples kept by confidence."""

    task = "classification"

    def __init__(self, output: str, labels: Any | None = None) -> None:
        super().__init__(None if labels is None else np.asarray(labels).reshape(-1))
        self.output = output
        self.classes = 0
        self.agree = {1: 0, TOP5: 0}
        self.clear_flips, self.near_ties, self.exact_ties = 0, 0, 0
        self.correct = {(1, "reference"): 0, (1, "candidate"): 0}
        self.correct |= {(TOP5, "reference"): 0, (TOP5, "candidate"): 0}

    def add(
        self,
        reference: dict[str, np.ndarray],
        candidate: dict[str, np.ndarray],
        *,
        first_sample: int,
    ) -> None:
        ref, cand = pair(reference, candidate, self.output)
        check_rank(ref, self.output, 2)
        self.classes = ref.shape[1]
        ref_top, cand_top = ref.argmax(axis=1), cand.argmax(axis=1)
        self.agree[1] += int(np.count_nonzero(ref_top == cand_top))
        gaps = top_two_gaps(ref, axis=1)
        tied = gaps < NEAR_TIE
        self.near_ties += int(np.count_nonzero(tied))
        self.exact_ties += int(np.count_nonzero(gaps <= EXACT_TIE))
        self.clear_flips += int(np.count_nonzero((ref_top != cand_top) & ~tied))
        if self.classes >= TOP5:
            self.agree[TOP5] += int(np.count_nonzero(_in_top5(cand, ref_top)))
        expected = self._labels(first_sample, len(ref))
        if expected is not None:
            self._add_correct(ref, cand, expected)
        self._offer_flips(ref, cand, first_sample, expected)
        self.samples += len(ref)

    def _labels(self, first_sample: int, count: int) -> np.ndarray | None:
        if self.labels is None:
            return None
        return class_ids(np.asarray(self.labels_for(first_sample, count)), self.classes)

    def _add_correct(self, ref: np.ndarray, cand: np.ndarray, expected: np.ndarray) -> None:
        for side, scores in (("reference", ref), ("candidate", cand)):
            self.correct[(1, side)] += int(np.count_nonzero(scores.argmax(axis=1) == expected))
            if self.classes >= TOP5:
                self.correct[(TOP5, side)] += int(np.count_nonzero(_in_top5(scores, expected)))

    def _offer_flips(
        self, ref: np.ndarray, cand: np.ndarray, first_sample: int, expected: np.ndarray | None
    ) -> None:
        ref_top, cand_top = ref.argmax(axis=1), cand.argmax(axis=1)
        for row in np.flatnonzero(ref_top != cand_top):
            confidence = _confidence(ref[row], int(ref_top[row]))
            label = None if expected is None else int(expected[row])
            self.worst.offer(
                1.0 if confidence is None else confidence,
                partial(_flip, first_sample + int(row), ref[row], cand[row], label),
            )

    def score(self) -> TaskScore:
        if self.samples == 0:
            return self.finished({})
        agreement = self.agree[1] / self.samples
        metrics = {
            "top1_agreement": agreement,
            "top1_disagreement": 1.0 - agreement,
            "clear_top1_disagreement": self.clear_flips / self.samples,
        }
        if self.classes >= TOP5:
            metrics["top5_agreement"] = self.agree[TOP5] / self.samples
        if self.labels is not None:
            metrics |= self._accuracy()
        note = _note(self.labels is not None, self.classes)
        flips = self.samples - self.agree[1]
        if flips > self.clear_flips:
            note += (
                f"; {flips - self.clear_flips} of the {flips} flips were near-ties "
                f"(the original's top two within {NEAR_TIE:g} in probability; "
                f"{self.near_ties} of {self.samples} samples were)"
            )
        return self.finished(
            metrics, note, void=void_by_ties(self.exact_ties, self.samples, "samples")
        )

    def _accuracy(self) -> dict[str, float]:
        share = {key: count / self.samples for key, count in self.correct.items()}
        metrics = {
            "top1_accuracy_reference": share[(1, "reference")],
            "top1_accuracy_candidate": share[(1, "candidate")],
            "top1_drop": share[(1, "reference")] - share[(1, "candidate")],
        }
        if self.classes >= TOP5:
            metrics["top5_drop"] = share[(TOP5, "reference")] - share[(TOP5, "candidate")]
        return metrics


def _in_top5(scores: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Per row: whether `classes[row]` is among the row's five highest scores."""
    top5 = np.argpartition(scores, -TOP5, axis=1)[:, -TOP5:]
    return (top5 == classes[:, None]).any(axis=1)


def _flip(sample: int, ref: np.ndarray, cand: np.ndarray, label: int | None) -> Disagreement:
    """A sample whose top-1 flipped: both classes with their confidences."""
    ref_class, cand_class = int(ref.argmax()), int(cand.argmax())
    confidence = _confidence(ref, ref_class)
    return Disagreement(
        sample=sample,
        reference=f"class {ref_class} ({_shown(confidence)})",
        candidate=f"class {cand_class} ({_shown(_confidence(cand, cand_class))})",
        label=None if label is None else f"class {label}",
        severity=1.0 if confidence is None else confidence,
    )


def _confidence(row: np.ndarray, cls: int) -> float | None:
    """The score of `cls`: the value itself when the row holds probabilities, else its
    softmax (logits, log-probabilities); None for a row with NaN or Inf."""
    values = row.astype(np.float64)
    if not np.isfinite(values).all():
        return None
    if values.min() >= 0 and values.max() <= 1:
        return float(values[cls])
    shifted = np.exp(values - values.max())
    return float(shifted[cls] / shifted.sum())


def _shown(confidence: float | None) -> str:
    return "NaN/Inf in the row" if confidence is None else f"{confidence:.2f}"


def _note(labelled: bool, classes: int) -> str:
    parts = [
        "top-1 accuracy against the given labels"
        if labelled
        else "no labels: top-1 is agreement with the original model"
    ]
    if classes < TOP5:
        parts.append(f"top-5 not measured ({classes} classes)")
    return "; ".join(parts)


CLASSIFICATION = EvaluatorInfo(
    name="classification",
    label="Classification",
    description="Judges a classifier by the class it picks: top-1 and top-5 agreement with the "
    "original, and with labels (class ids) each model's top-1 accuracy and the drop. The "
    "drill-down lists the samples whose top-1 flipped, with both classes and confidences.",
    metrics=METRICS,
    default_budget={"clear_top1_disagreement": 0.01, "top1_disagreement": 0.05},
    labels_budget={"top1_drop": 0.01},
    implementation="optistudio.core.numerics.evaluators.classification:ClassificationEvaluator",
    priority=50,
    input_kinds=("image", "tokens", "audio"),
)
