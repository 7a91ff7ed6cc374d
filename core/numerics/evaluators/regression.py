"""Regression: a variant judged by how far its predicted values move, relative to the original's.

The judged output holds one value per sample, [N] or [N, 1] floats (scikit-learn regressors
exported by skl2onnx call it 'variable'; a scalar when the graph squeezes the one sample fed, as
PLCMOS does), or a few values per sample [N, K] from a linear head with no softmax or sigmoid
after it (three opinion scores of a speech-quality model). Weighed as evidence (`evidence`): one
float per sample is MODERATE, WEAK when a linear head makes it (a binary classifier's logit
looks the same: `binary` reads it); K <= FEW_VALUES values from a linear head MODERATE, and
WEAK more for so few of them (classes come in more); an output made by a softmax, a sigmoid or
an ArgMax is not a regressor's, but one such op scaled and shifted by constants (1 + 4 *
sigmoid(x), `rescaled`) is a score on a fixed range: WEAK more. A name like 'variable' or 'value' adds
WEAK support, one like 'logits' or 'prob' WEAK evidence against. With r_i and c_i the original's
and the variant's values of sample i (K of them; one for [N] and [N, 1]):

    e_i = |r_i - c_i| / max(|r_i|, 1e-6)       (relative error, |.| the Euclidean norm over
                                                  the K values; the floor keeps a zero
                                                  prediction from dividing by zero)
    mean_relative_error = mean_i e_i   (default budget: <= 0.01),   max_relative_error = max_i e_i

A NaN or Inf from the variant counts as e_i = 1 (as far off as no prediction at all; the note
counts them, and the accuracy report fails any variant that makes them); metrics stay finite
so they store as JSON.
With labels y_i (a .npy of floats, [N] or [N, 1], or a .csv of one number per line; one value
per sample only) each model's mean absolute error and the increase, in the target's own unit:

    mae_m = mean_i |m_i - y_i|,   mae_increase = mae_candidate - mae_reference

The drill-down lists the samples with the largest relative errors.
"""

from __future__ import annotations

import csv
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from optistudio.core.data.npy_headers import checked_npy_header
from optistudio.core.errors import DataMismatch
from optistudio.core.numerics.evaluators.base import (
    Case,
    Disagreement,
    EvaluatorInfo,
    MetricInfo,
    OutputFacts,
    Recognition,
    TaskScore,
    TaskTally,
)
from optistudio.core.numerics.evaluators.evidence import MODERATE, WEAK, Evidence
from optistudio.core.numerics.evaluators.outputs import (
    FEW_VALUES,
    REGRESSION_WORDS,
    SQUASHING,
    WeighedEvaluator,
    is_float,
    linear_head,
    made_by,
    named_like,
    shape_text,
    size,
)
from optistudio.core.numerics.evaluators.tallying import BaseTally, pair

EPS = 1e-6
BROKEN = 1.0
"""The relative error a NaN or Inf counts as."""

METRICS = [
    MetricInfo(
        name="mean_relative_error",
        label="Mean relative error",
        higher_is_better=False,
        unit="ratio",
        description="|original - variant| / max(|original|, 1e-6), averaged over samples.",
    ),
    MetricInfo(
        name="max_relative_error",
        label="Max relative error",
        higher_is_better=False,
        unit="ratio",
        description="The largest relative error of any sample.",
    ),
    MetricInfo(
        name="mae_reference",
        label="MAE vs labels (original)",
        higher_is_better=False,
        unit="value",
        needs_labels=True,
        description="Mean |original - label|, in the target's unit.",
    ),
    MetricInfo(
        name="mae_candidate",
        label="MAE vs labels (variant)",
        higher_is_better=False,
        unit="value",
        needs_labels=True,
        description="Mean |variant - label|, in the target's unit.",
    ),
    MetricInfo(
        name="mae_increase",
        label="MAE increase",
        higher_is_better=False,
        unit="value",
        needs_labels=True,
        description="Variant minus original mean absolute error against the labels.",
    ),
]


def _values_per_sample(output: OutputFacts) -> int | None:
    """K for an output [N] (1) or [N, K] with K fixed, 1 for a scalar (the one sample fed);
    None for any other shape."""
    shape = output.shape
    if len(shape) == 1 or (output.scalar and not shape):
        return 1
    return size(shape[1]) if len(shape) == 2 else None


def _why_not(output: OutputFacts) -> str | None:
    if len(output.shape) in (1, 2) or output.scalar:
        return None
    return "a regressor's predictions are [N] or a few values per sample [N, K]"


def _regressor_case(task: str, output: OutputFacts) -> Case | None:
    """The case for `output` as a regressor's predictions, or None when it cannot be one."""
    count = _values_per_sample(output)
    if not is_float(output) or count is None or output.producer in SQUASHING:
        return None
    linear = linear_head(output)
    shape = "(a scalar)" if output.scalar and not output.shape else shape_text(output.shape, "N")
    if count == 1:
        reason = f"{output.name} {shape} holds one float per sample: a regressor's predictions"
        if linear:
            reason += f" (or, from {made_by(output)}, a binary classifier's logit)"
        evidence = [Evidence(kind="structure", weight=WEAK if linear else MODERATE, text=reason)]
    elif output.scaled_from and count <= FEW_VALUES:
        reason = f"{output.name} {shape}: {count} values per sample, a regressor's predictions"
        evidence = [Evidence(kind="structure", weight=MODERATE, text=reason)]
    elif linear and count <= FEW_VALUES:
        reason = (
            f"{output.name} {shape} after {made_by(output)} with no softmax or sigmoid: "
            f"{count} values per sample, a regressor's predictions"
        )
        evidence = [
            Evidence(kind="structure", weight=MODERATE, text=reason),
            Evidence(
                kind="structure",
                weight=WEAK,
                text=f"only {count} values: fewer than classes come in",
            ),
        ]
    else:
        return None
    evidence += _name_evidence(output) + _range_evidence(output)
    recognition = Recognition(task=task, reason=reason, outputs=[output.name])
    return Case(recognition=recognition, evidence=evidence)


class RegressionEvaluator(WeighedEvaluator):
    """Relative error of each sample's predicted values; mean absolute error against labels."""

    why_not = staticmethod(_why_not)
    case = staticmethod(_regressor_case)

    def tally(self, recognition: Recognition, labels: Any | None = None) -> TaskTally:
        return RegressionTally(recognition.outputs[0], labels)

    def read_labels(self, path: Path, *, samples: int) -> np.ndarray:
        """Target values: a .npy of floats ([N] or [N, 1]) or a .csv of one number per line."""
        path = Path(path)
        values = _npy_values(path) if path.suffix.lower() == ".npy" else _csv_values(path)
        if len(values) != samples:
            raise DataMismatch(
                f"labels have {len(values)} values but the data has {samples} samples.",
                hint="Give exactly one target value per sample, in the data's order.",
            )
        return values


def _npy_values(path: Path) -> np.ndarray:
    header = checked_npy_header(path)  # a bomb is refused before any byte is loaded
    shape = header.shape
    if header.dtype.kind not in "fiu" or len(shape) not in (1, 2) or shape[1:] not in ((), (1,)):
        raise _not_values(path)
    try:
        values = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        raise _not_values(path) from None
    return values.reshape(-1).astype(np.float64)


def _csv_values(path: Path) -> np.ndarray:
    try:
        rows = list(csv.reader(path.read_text(encoding="utf-8").splitlines()))
        return np.array([float(row[0]) for row in rows if row], dtype=np.float64)
    except (OSError, UnicodeDecodeError, ValueError):
        raise _not_values(path) from None


def _not_values(path: Path) -> DataMismatch:
    return DataMismatch(
        f"The labels file {path.name} is not one number per sample.",
        hint="Give target values as a .npy of floats ([N] or [N, 1]) or a .csv, one per line.",
    )


def _range_evidence(output: OutputFacts) -> list[Evidence]:
    """A squashing op scaled and shifted by constants (`rescaled`): a score on a fixed range,
    such as a MOS of 1-5; a classifier's probability is never moved onto another range."""
    if not output.scaled_from:
        return []
    text = (
        f"{output.name} is a {output.scaled_from} scaled and shifted by constants: a score on "
        "a fixed range (such as 1-5), not a probability"
    )
    return [Evidence(kind="structure", weight=WEAK, text=text)]


def _name_evidence(output: OutputFacts) -> list[Evidence]:
    if named_like(output, *REGRESSION_WORDS):
        return [Evidence(kind="name", weight=WEAK, text=f"named {output.name!r}, like a value")]
    if named_like(output, "logit", "prob", "class"):
        return [Evidence(kind="name", weight=-WEAK, text=f"named {output.name!r}, like scores")]
    return []


class RegressionTally(BaseTally):
    """Relative-error sums and maximum; absolute errors against labels."""

    task = "regression"

    def __init__(self, output: str, labels: np.ndarray | None = None) -> None:
        super().__init__(None if labels is None else np.asarray(labels, np.float64).reshape(-1))
        self.output = output
        self.error_sum = 0.0
        self.error_max = 0.0
        self.absolute = {"reference": 0.0, "candidate": 0.0}
        self.nonfinite = 0

    def add(
        self,
        reference: dict[str, np.ndarray],
        candidate: dict[str, np.ndarray],
        *,
        first_sample: int,
    ) -> None:
        ref, cand = pair(reference, candidate, self.output)
        ref, cand = _values(ref, self.output), _values(cand, self.output)
        errors = relative_errors(ref, cand)
        self.nonfinite += int(np.count_nonzero(~np.isfinite(cand)))
        self.error_sum += float(errors.sum())
        self.error_max = max(self.error_max, float(errors.max(initial=0.0)))
        truth = self._truth(first_sample, ref)
        for row in np.argsort(-errors)[: self.worst.keep]:
            label = None if truth is None else float(truth[row])
            self.worst.offer(
                float(errors[row]),
                partial(_off, first_sample + int(row), ref[row], cand[row], errors[row], label),
            )
        self.samples += len(ref)
        if truth is not None:
            self.absolute["reference"] += float(np.abs(ref[:, 0] - truth).sum())
            self.absolute["candidate"] += float(np.abs(cand[:, 0] - truth).sum())

    def _truth(self, first_sample: int, ref: np.ndarray) -> np.ndarray | None:
        """The labels of this batch; DataMismatch for an output of several values a sample."""
        if self.labels is None:
            return None
        if ref.shape[1] != 1:
            raise DataMismatch(
                f"Output {self.output!r} holds {ref.shape[1]} values per sample; target values "
                "are read for one value per sample only.",
                hint="Judge it without labels (agreement with the original).",
            )
        return np.asarray(self.labels_for(first_sample, len(ref)), np.float64)

    def score(self) -> TaskScore:
        if self.samples == 0:
            return self.finished({})
        metrics = {
            "mean_relative_error": self.error_sum / self.samples,
            "max_relative_error": self.error_max,
        }
        if self.labels is not None:
            reference = self.absolute["reference"] / self.samples
            candidate = self.absolute["candidate"] / self.samples
            metrics |= {
                "mae_reference": reference,
                "mae_candidate": candidate,
                "mae_increase": candidate - reference,
            }
        note = f"relative error |r - c| / max(|r|, {EPS:g})"
        if self.nonfinite:
            note += f"; {self.nonfinite} NaN/Inf values from the variant, each counted as 100 % off"
        return self.finished(metrics, note)


def _off(
    sample: int, ref: np.ndarray, cand: np.ndarray, error: float, label: float | None
) -> Disagreement:
    """A sample whose values moved: both and how far, relative to the original's."""
    return Disagreement(
        sample=sample,
        reference=_shown(ref),
        candidate=f"{_shown(cand)} ({error:.2%} off)",
        label=None if label is None else f"{label:.6g}",
        severity=float(error),
    )


def _shown(values: np.ndarray) -> str:
    """'0.5' for one value, '[0.5, 1.25, 3]' for several."""
    if values.size == 1:
        return f"{float(values.reshape(-1)[0]):.6g}"
    return "[" + ", ".join(f"{float(value):.6g}" for value in values.reshape(-1)) + "]"


def relative_errors(reference: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """|r - c| / max(|r|, EPS) per sample (the norm over a row's values when the arrays are
    [N, K]); BROKEN where a value is not finite."""
    ref = reference.reshape(len(reference), -1).astype(np.float64)
    cand = candidate.reshape(len(candidate), -1).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        errors = np.linalg.norm(ref - cand, axis=1) / np.maximum(np.linalg.norm(ref, axis=1), EPS)
    finite = np.isfinite(cand).all(axis=1) & np.isfinite(errors)
    return np.where(finite, errors, BROKEN)


def _values(array: np.ndarray, name: str) -> np.ndarray:
    """[N], [N, 1] or [N, K] as [N, K] float64 values, a scalar as the one sample's value;
    DataMismatch for any other shape."""
    if array.ndim == 0:
        return array.reshape(1, 1).astype(np.float64)
    if array.ndim == 1:
        return array.reshape(-1, 1).astype(np.float64)
    if array.ndim == 2:
        return array.astype(np.float64)
    raise DataMismatch(
        f"Output {name!r} has shape {list(array.shape)}; a regressor's predictions are [N] or "
        "a few values per sample, [N, K].",
        hint="Set the task or the judged output by hand if recognition picked wrongly.",
    )


REGRESSION = EvaluatorInfo(
    name="regression",
    label="Regression",
    description="Judges a regressor by how far each sample's predicted values move: the mean "
    "and the largest relative error against the original's values (one per sample, or a few "
    "from a linear head with no softmax or sigmoid); with target values each model's mean "
    "absolute error and the increase. The drill-down lists the largest relative errors.",
    metrics=METRICS,
    default_budget={"mean_relative_error": 0.01},
    implementation="optistudio.core.numerics.evaluators.regression:RegressionEvaluator",
    priority=70,
)
