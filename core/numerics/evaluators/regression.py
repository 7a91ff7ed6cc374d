"""Regression: a variant judged by how far its predicted values move, relative to the original's.

The judged output holds one value per sample, [N] or [N, 1] floats (scikit-learn regressors
exported by skl2onnx call it 'variable'). With r_i and c_i the original's and the variant's
values:

    e_i = |r_i - c_i| / max(|r_i|, 1e-6)       (relative error; the floor keeps a zero
                                                  prediction from dividing by zero)
    mean_relative_error = mean_i e_i   (default budget: <= 0.01),   max_relative_error = max_i e_i

A NaN or Inf from the variant counts as e_i = 1 (as far off as no prediction at all; the note
counts them, and the accuracy report fails any variant that makes them); metrics stay finite
so they store as JSON.
With labels y_i (a .npy of floats, [N] or [N, 1], or a .csv of one number per line) each
model's mean absolute error and the increase, in the target's own unit:

    mae_m = mean_i |m_i - y_i|,   mae_increase = mae_candidate - mae_reference

The drill-down lists the samples with the largest relative errors.
"""

from __future__ import annotations

import csv
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from optistudio.core.errors import DataMismatch
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
from optistudio.core.numerics.evaluators.evidence import MODERATE, Evidence
from optistudio.core.numerics.evaluators.outputs import (
    OneOutputEvaluator,
    is_float,
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


def _is_one_value(output: OutputFacts) -> bool:
    shape = output.shape
    return len(shape) == 1 or (len(shape) == 2 and size(shape[1]) == 1)


def _why_not(output: OutputFacts) -> str | None:
    return None if _is_one_value(output) else "a regressor's predictions are [N] or [N, 1]"


class RegressionEvaluator(OneOutputEvaluator):
    """Relative error of each predicted value; mean absolute error against labels."""

    why_not = staticmethod(_why_not)

    def recognize(self, facts: ModelFacts) -> Recognition | None:
        for output in facts.outputs:
            if is_float(output) and _is_one_value(output):
                return Recognition(
                    task=self.info.name,
                    reason=f"{output.name} {shape_text(output.shape, 'N')} holds one float per "
                    "sample: a regressor's predictions",
                    outputs=[output.name],
                )
        return None

    def weigh(self, facts: ModelFacts) -> Case | None:
        """One float per sample fits a regressor among others (a score, a logit): MODERATE."""
        found = self.recognize(facts)
        if found is None:
            return None
        return Case(
            recognition=found,
            evidence=[Evidence(kind="structure", weight=MODERATE, text=found.reason)],
        )

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
    try:
        values = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        values = None
    if values is None or values.dtype.kind not in "fiu" or values.ndim not in (1, 2):
        raise _not_values(path)
    if values.ndim == 2 and values.shape[1] != 1:
        raise _not_values(path)
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
        truth = None
        if self.labels is not None:
            truth = np.asarray(self.labels_for(first_sample, len(ref)), np.float64)
            self.absolute["reference"] += float(np.abs(ref - truth).sum())
            self.absolute["candidate"] += float(np.abs(cand - truth).sum())
        for row in np.argsort(-errors)[: self.worst.keep]:
            label = None if truth is None else float(truth[row])
            self.worst.offer(
                float(errors[row]),
                partial(_off, first_sample + int(row), ref[row], cand[row], errors[row], label),
            )
        self.samples += len(ref)

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


def _off(sample: int, ref: float, cand: float, error: float, label: float | None) -> Disagreement:
    """A sample whose value moved: both values and how far, relative to the original's."""
    return Disagreement(
        sample=sample,
        reference=f"{ref:.6g}",
        candidate=f"{cand:.6g} ({error:.2%} off)",
        label=None if label is None else f"{label:.6g}",
        severity=float(error),
    )


def relative_errors(reference: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """|r - c| / max(|r|, EPS) per sample; BROKEN where either value is not finite."""
    with np.errstate(invalid="ignore", over="ignore"):
        errors = np.abs(reference - candidate) / np.maximum(np.abs(reference), EPS)
    return np.where(np.isfinite(candidate) & np.isfinite(errors), errors, BROKEN)


def _values(array: np.ndarray, name: str) -> np.ndarray:
    """[N] or [N, 1] as N float64 values; DataMismatch for any other shape."""
    if array.ndim == 1 or (array.ndim == 2 and array.shape[1] == 1):
        return array.reshape(-1).astype(np.float64)
    raise DataMismatch(
        f"Output {name!r} has shape {list(array.shape)}; a regressor's predictions are one "
        "value per sample, [N] or [N, 1].",
        hint="Set the task or the judged output by hand if recognition picked wrongly.",
    )


REGRESSION = EvaluatorInfo(
    name="regression",
    label="Regression",
    description="Judges a regressor by how far each predicted value moves: the mean and the "
    "largest relative error against the original's value; with target values each model's mean "
    "absolute error and the increase. The drill-down lists the largest relative errors.",
    metrics=METRICS,
    default_budget={"mean_relative_error": 0.01},
    implementation="optistudio.core.numerics.evaluators.regression:RegressionEvaluator",
    priority=70,
)
