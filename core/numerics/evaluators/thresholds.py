"""Decisions at a threshold: a binary or multi-label model judged by how many cells flip.

A cell is one probability the model gives: one per sample for a binary classifier ([N] or
[N, 1]), one per label (and per position, for maps) for a multi-label one ([N, K], [N, T, K],
[N, K, H, W]). An output whose values on the first batch all lie in [0, 1] is read as
probabilities; any other as logits, through the sigmoid. A cell is on when its probability
p > THRESHOLD (0.5). With R and C the original's and the variant's cells, over every cell of
every judged output and sample:

    flip            = [R on] != [C on]
    near-tie        = |p_R - 0.5| < THRESHOLD_MARGIN (0.05)      (`near_ties`)
    flip_rate       = flips / cells,    clear_flip_rate = flips off the near-ties / cells
    clear_positive_f1 = 2 |on(R) ∩ on(C')| / (|on(R)| + |on(C')|)   (1 when both are empty)

where C' is the variant with its near-tie flips undone: most cells of a multi-label output are
off, so the flip rate alone would hide a variant that loses every label that is on.
sample_agreement is the fraction of samples with no clear flip. With labels (a binary
classifier only: 0 / 1 per sample, .npy or .csv) each model's accuracy and the drop. An
original whose cells sit exactly on the threshold on most cells (the sigmoid of a zero logit)
decides by rounding: the score says it is void and the numbers judge.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import numpy as np

from optistudio.core.errors import DataMismatch
from optistudio.core.numerics.evaluators.base import Disagreement, TaskScore
from optistudio.core.numerics.evaluators.near_ties import (
    EXACT_TIE,
    THRESHOLD_MARGIN,
    void_by_ties,
)
from optistudio.core.numerics.evaluators.tallying import BaseTally, pair

THRESHOLD = 0.5


class Cells:
    """One batch's cells of one output, both models', as probabilities [samples, cells]."""

    def __init__(self, ref: np.ndarray, cand: np.ndarray, logits: bool) -> None:
        rows = len(ref) if ref.ndim else 1
        self.ref = _probability(ref.reshape(rows, -1), logits)
        self.cand = _probability(cand.reshape(rows, -1), logits)
        self.ref_on, self.cand_on = self.ref > THRESHOLD, self.cand > THRESHOLD
        self.near = np.abs(self.ref - THRESHOLD) < THRESHOLD_MARGIN
        self.flips = self.ref_on != self.cand_on
        self.clear = self.flips & ~self.near

    def resolved_on(self) -> np.ndarray:
        """The variant's cells that are on, its near-tie flips undone."""
        return np.where(self.flips & self.near, self.ref_on, self.cand_on)


class ThresholdTally(BaseTally):
    """Flip counts over the judged outputs' cells; the samples with the most clear flips kept."""

    def __init__(self, task: str, outputs: list[str], labels: Sequence[int] | None = None) -> None:
        super().__init__(None if labels is None else np.asarray(labels).reshape(-1))
        self.task = task
        self.outputs = outputs
        self.logits: dict[str, bool] = {}
        self.cells = self.flips = self.clear = self.tied = 0
        self.on = {"reference": 0, "candidate": 0, "both": 0}
        self.agreeing_samples = 0
        self.correct = {"reference": 0, "candidate": 0}

    def add(
        self,
        reference: dict[str, np.ndarray],
        candidate: dict[str, np.ndarray],
        *,
        first_sample: int,
    ) -> None:
        batch = [self._cells(name, reference, candidate) for name in self.outputs]
        rows = len(batch[0].ref)
        if any(len(cells.ref) != rows for cells in batch):
            raise DataMismatch(
                f"The outputs {', '.join(self.outputs)} hold different numbers of samples; "
                "they cannot be judged together.",
                hint="Judge one output at a time (set the judged output).",
            )
        clear_per_sample = sum(cells.clear.sum(axis=1) for cells in batch)
        for cells in batch:
            self._count(cells)
        self.agreeing_samples += int(np.count_nonzero(clear_per_sample == 0))
        if self.labels is not None:
            self._add_labels(batch[0], first_sample)
        for row in np.flatnonzero(clear_per_sample):
            self.worst.offer(
                float(clear_per_sample[row]),
                partial(_flipped, first_sample + int(row), batch, int(row)),
            )
        self.samples += rows

    def _cells(
        self, name: str, reference: dict[str, np.ndarray], candidate: dict[str, np.ndarray]
    ) -> Cells:
        ref, cand = pair(reference, candidate, name)
        if name not in self.logits:
            finite = ref[np.isfinite(ref)]
            self.logits[name] = bool(finite.size) and not (finite.min() >= 0 and finite.max() <= 1)
        return Cells(ref, cand, self.logits[name])

    def _count(self, cells: Cells) -> None:
        self.cells += cells.ref.size
        self.flips += int(np.count_nonzero(cells.flips))
        self.clear += int(np.count_nonzero(cells.clear))
        self.tied += int(np.count_nonzero(np.abs(cells.ref - THRESHOLD) <= EXACT_TIE))
        resolved = cells.resolved_on()
        self.on["reference"] += int(np.count_nonzero(cells.ref_on))
        self.on["candidate"] += int(np.count_nonzero(resolved))
        self.on["both"] += int(np.count_nonzero(cells.ref_on & resolved))

    def _add_labels(self, cells: Cells, first_sample: int) -> None:
        if cells.ref.shape[1] != 1:
            raise DataMismatch(
                "Labels are read for one decision per sample (a binary classifier); this output "
                f"holds {cells.ref.shape[1]} per sample.",
                hint="Judge a multi-label model without labels (agreement with the original).",
            )
        truth = np.asarray(self.labels_for(first_sample, len(cells.ref))).reshape(-1) > 0
        self.correct["reference"] += int(np.count_nonzero(cells.ref_on[:, 0] == truth))
        self.correct["candidate"] += int(np.count_nonzero(cells.cand_on[:, 0] == truth))

    def rates(self) -> dict[str, float]:
        """flip_rate, clear_flip_rate, clear_positive_f1 and sample_agreement (docstring)."""
        both, sides = self.on["both"], self.on["reference"] + self.on["candidate"]
        return {
            "flip_rate": self.flips / max(self.cells, 1),
            "clear_flip_rate": self.clear / max(self.cells, 1),
            "clear_positive_f1": 2 * both / sides if sides else 1.0,
            "sample_agreement": self.agreeing_samples / max(self.samples, 1),
        }

    def accuracy(self) -> dict[str, float]:
        """With labels: each model's accuracy and the drop."""
        if self.labels is None or not self.samples:
            return {}
        reference, candidate = (self.correct[side] / self.samples for side in self.correct)
        return {
            "accuracy_reference": reference,
            "accuracy_candidate": candidate,
            "accuracy_drop": reference - candidate,
        }

    def scored(self, metrics: dict[str, float]) -> TaskScore:
        """The score with `metrics` (the task's pick of `rates`) and the note."""
        read = [
            f"{name} as {'logits' if self.logits.get(name) else 'probabilities'}"
            for name in self.outputs
        ]
        note = (
            f"{'; '.join(read)}; on above {THRESHOLD}; {self.flips} of {self.cells} cells "
            f"flipped, {self.flips - self.clear} of them at the original's near-ties (within "
            f"{THRESHOLD_MARGIN:g} of {THRESHOLD})"
        )
        return self.finished(metrics, note, void=void_by_ties(self.tied, self.cells, "cells"))


def _probability(values: np.ndarray, logits: bool) -> np.ndarray:
    values = np.nan_to_num(values.astype(np.float64), nan=0.0)
    if not logits:
        return values
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-values))


def _flipped(sample: int, batch: list[Cells], row: int) -> Disagreement:
    """A sample with clear flips: how many cells each model has on, and how many flipped."""
    ref_on = sum(int(cells.ref_on[row].sum()) for cells in batch)
    cand_on = sum(int(cells.cand_on[row].sum()) for cells in batch)
    clear = sum(int(cells.clear[row].sum()) for cells in batch)
    total = sum(cells.ref.shape[1] for cells in batch)
    return Disagreement(
        sample=sample,
        reference=f"{ref_on} of {total} on",
        candidate=f"{cand_on} of {total} on, {clear} flipped beyond near-ties",
        severity=float(clear),
    )
