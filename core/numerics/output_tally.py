"""Running sums of an accuracy check over batches: errors per output, the judged output's
cosines and top-1, and each output's numeric floor (`numeric_floor`); its report is an
`AccuracyReport` before the task's score is added (`accuracy.accuracy_report`).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from optistudio.core.errors import DataMismatch, OutputsDiffer
from optistudio.core.numerics.accuracy_report import (
    LABELLED_NOTE,
    SYNTHETIC_NOTE,
    UNLABELLED_NOTE,
    AccuracyReport,
)
from optistudio.core.numerics.evaluators.tallying import class_ids
from optistudio.core.numerics.numeric_floor import FloorTally
from optistudio.core.numerics.numeric_floor import cosines as numeric_cosines
from optistudio.core.numerics.samples import Declared, paired_views, sample_view, shape_note


class OutputErrors:
    """Running absolute-error sums for one output."""

    def __init__(self) -> None:
        self.max = 0.0
        self.total = 0.0
        self.count = 0

    def add(self, error: np.ndarray) -> None:
        if error.size:
            self.max = max(self.max, float(error.max()))
            self.total += float(error.sum())
            self.count += error.size


class OutputTally:
    """Running sums over batches: errors per output, cosines, top-1 counts.

    Each output is read per sample fed from its real shape (`samples.paired_views`); an output
    whose real shapes differ between the models or from the declaration (`declared`, each
    model's, by output) is named in the note. `lenient` (a task judges too): a batch whose
    outputs hold another number of values (a detector's NMS keeps a different number of boxes)
    is left to the task's evaluator; cosine and errors cover the other batches, and the note
    says how many were left out."""

    def __init__(
        self,
        labels: np.ndarray | None,
        *,
        index: int = 0,
        top1: bool = True,
        lenient: bool = False,
        declared: tuple[list[Declared], list[Declared]] = ([], []),
    ) -> None:
        self.lenient = lenient
        self.declared = declared
        self.shape_notes: dict[str, str] = {}
        self.mismatched = 0
        self.labels = labels
        self.index = index
        self.top1 = top1
        self.samples = 0
        self.errors: list[OutputErrors] = []
        self.nonfinite = 0
        self.cosine_sum = 0.0
        self.cosine_rows = 0
        self.cosine_min = 1.0
        self.classification = True
        self.agree = 0
        self.tied = 0
        self.correct = [0, 0]
        self.floor = FloorTally()

    def add(
        self,
        reference: list[np.ndarray],
        candidate: list[np.ndarray],
        *,
        rows: int,
        names: list[str] | None = None,
    ) -> None:
        """One batch of both models' outputs (in the reference's order), `rows` samples fed."""
        names = names or [f"output {place}" for place in range(len(reference))]
        try:
            views = self._views(names, reference, candidate, rows)
        except OutputsDiffer:
            if not self.lenient:
                raise
            self.mismatched += 1
            self.classification = False
            return
        self._note_shapes(names, reference, candidate)
        self._add_errors(views)
        for name, ref, (ref64, cand64) in zip(names, reference, views, strict=True):
            floating = np.issubdtype(np.asarray(ref).dtype, np.floating)
            self.floor.add(name, ref64, cand64, floating=bool(floating))
        cosines = numeric_cosines(*views[self.index])
        self.cosine_sum += float(cosines.sum())
        self.cosine_rows += len(cosines)
        self.cosine_min = min(self.cosine_min, float(cosines.min(initial=1.0)))
        self._add_top1(reference[self.index], candidate[self.index], rows)
        self.samples += rows

    def note_inputs(self, batch: dict[str, np.ndarray], rows: int) -> None:
        """The inputs of one batch, `rows` samples: whether they differ is kept, so that a
        constant output is the model's doing, not the data's."""
        views = [sample_view(array, rows) for array in batch.values()]
        self.floor.add_inputs([view for view in views if len(view) == rows])

    def _views(
        self,
        names: list[str],
        reference: list[np.ndarray],
        candidate: list[np.ndarray],
        rows: int,
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        if len(reference) != len(candidate):
            raise OutputsDiffer(
                f"The original returns {len(reference)} outputs and the variant "
                f"{len(candidate)}; they cannot be compared.",
                hint="The variant, not your model, is at fault: use another variant.",
            )
        return [
            paired_views(name, ref, cand, rows, (self._declared(0, at), self._declared(1, at)))
            for at, (name, ref, cand) in enumerate(zip(names, reference, candidate, strict=True))
        ]

    def _declared(self, side: int, at: int) -> Declared:
        shapes = self.declared[side]
        return shapes[at] if at < len(shapes) else None

    def _note_shapes(
        self, names: list[str], reference: list[np.ndarray], candidate: list[np.ndarray]
    ) -> None:
        for at, (name, ref, cand) in enumerate(zip(names, reference, candidate, strict=True)):
            if name not in self.shape_notes:
                note = shape_note(name, self._declared(0, at), np.shape(ref), np.shape(cand))
                if note:
                    self.shape_notes[name] = note

    def _add_errors(self, views: list[tuple[np.ndarray, np.ndarray]]) -> None:
        if not self.errors:
            self.errors = [OutputErrors() for _ in views]
        for errors, (ref64, cand64) in zip(self.errors, views, strict=True):
            finite = np.isfinite(ref64) & np.isfinite(cand64)
            self.nonfinite += int(np.count_nonzero(~np.isfinite(cand64)))
            errors.add(np.abs(ref64 - cand64)[finite])

    def _add_top1(self, reference: np.ndarray, candidate: np.ndarray, rows: int) -> None:
        """Top-1 of a [batch, classes] output, the same shape on both sides."""
        self.classification &= (
            reference.ndim == 2
            and reference.shape == candidate.shape
            and reference.shape[0] == rows
            and reference.shape[1] > 1
        )
        if not self.classification:
            return
        ref_top, cand_top = reference.argmax(axis=-1), candidate.argmax(axis=-1)
        self.agree += int(np.count_nonzero(ref_top == cand_top))
        top2 = -np.partition(-reference.astype(np.float64), 1, axis=-1)[:, :2]
        self.tied += int(np.count_nonzero(top2[:, 0] == top2[:, 1]))
        if self.labels is not None:
            expected = self._labels_for(len(ref_top), reference.shape[1])
            self.correct[0] += int(np.count_nonzero(ref_top == expected))
            self.correct[1] += int(np.count_nonzero(cand_top == expected))

    def _labels_for(self, count: int, classes: int) -> np.ndarray:
        assert self.labels is not None
        expected = self.labels[self.samples : self.samples + count]
        if len(expected) < count:
            raise DataMismatch(
                f"labels have {len(self.labels)} entries but the dataset has more samples."
            )
        return class_ids(expected, classes)

    def report(
        self,
        synthetic: bool,
        *,
        names: list[str],
        role: Literal["classifier", "embedding", "other"] = "other",
        backend: str = "onnxruntime",
    ) -> AccuracyReport:
        if self.samples == 0 and self.mismatched:
            return self._all_mismatched(synthetic, names, role, backend)
        self._check_complete()
        counted = sum(errors.count for errors in self.errors)
        top1 = self._top1_fields()
        return AccuracyReport(
            samples=self.samples,
            data="synthetic" if synthetic else "user",
            max_abs_error=max(errors.max for errors in self.errors),
            mean_abs_error=sum(errors.total for errors in self.errors) / max(counted, 1),
            output=names[self.index] if names else "",
            mean_cosine=self.cosine_sum / max(self.cosine_rows, 1),
            min_cosine=self.cosine_min,
            per_output_max_abs_error={
                name: errors.max for name, errors in zip(names, self.errors, strict=False)
            },
            nan_or_inf=self.nonfinite > 0,
            nonfinite_values=self.nonfinite,
            note=(SYNTHETIC_NOTE if synthetic else self._note())
            + self._shapes_note()
            + self._mismatch_note()
            + self._tie_note(),
            output_role=role,
            candidate_backend=backend,
            top1_agreement=top1.get("top1_agreement"),
            top1_accuracy_reference=top1.get("top1_accuracy_reference"),
            top1_accuracy_candidate=top1.get("top1_accuracy_candidate"),
            top1_drop=top1.get("top1_drop"),
            output_floors=self.floor.floors(),
            constant_outputs=self.floor.constant_outputs(),
        )

    def _all_mismatched(
        self,
        synthetic: bool,
        names: list[str],
        role: Literal["classifier", "embedding", "other"],
        backend: str,
    ) -> AccuracyReport:
        """No batch had outputs of equal shapes: the task's evaluator is the only judge."""
        return AccuracyReport(
            samples=0,
            data="synthetic" if synthetic else "user",
            max_abs_error=0.0,
            mean_abs_error=0.0,
            output=names[self.index] if names else "",
            mean_cosine=0.0,
            min_cosine=0.0,
            per_output_max_abs_error={},
            nan_or_inf=False,
            note=f"the outputs differ in shape on all {self.mismatched} batches (e.g. a "
            "different number of detections): cosine and errors are not defined; the task's "
            "metrics judge",
            output_role=role,
            candidate_backend=backend,
        )

    def _check_complete(self) -> None:
        if self.samples == 0:
            raise DataMismatch("The dataset is empty: no samples were compared.")
        if self.labels is not None and not self.classification:
            raise DataMismatch(
                "Labels were given but the model's first output is not [batch, classes], "
                "so top-1 accuracy is undefined."
            )
        if self.labels is not None and len(self.labels) != self.samples:
            raise DataMismatch(
                f"labels have {len(self.labels)} entries but the dataset has "
                f"{self.samples} samples."
            )

    def _shapes_note(self) -> str:
        if not self.shape_notes:
            return ""
        return "; " + "; ".join(self.shape_notes.values()) + " (compared per sample)"

    def _mismatch_note(self) -> str:
        if not self.mismatched:
            return ""
        return (
            f"; {self.mismatched} batch(es) left out of cosine and errors: their outputs "
            "differ in shape (e.g. a different number of detections)"
        )

    def _note(self) -> str:
        return LABELLED_NOTE if self.labels is not None else UNLABELLED_NOTE

    def _ties(self) -> bool:
        """Whether the original's top two scores are equal on most samples: top-1 then says
        nothing (every variant 'agrees' over a tie), so it is not reported."""
        return self.classification and self.tied * 2 > self.samples

    def _tie_note(self) -> str:
        if not (self.top1 and self.labels is None and self._ties()):
            return ""
        return (
            f"; top-1 not judged: the original's top two scores are equal on {self.tied} of "
            f"{self.samples} samples"
        )

    def _top1_fields(self) -> dict[str, float | None]:
        if not (self.classification and self.top1) or (self.labels is None and self._ties()):
            return {}
        fields: dict[str, float | None] = {"top1_agreement": self.agree / self.samples}
        if self.labels is not None:
            reference, candidate = (count / self.samples for count in self.correct)
            fields |= {
                "top1_accuracy_reference": reference,
                "top1_accuracy_candidate": candidate,
                "top1_drop": reference - candidate,
            }
        return fields
