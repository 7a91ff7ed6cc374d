"""Object detection: a variant judged by the boxes it finds, matched to the original's by IoU.

Outputs read, in the recognition's order (boxes are corners x1, y1, x2, y2):

- split: boxes [N, K, 4] or [K, 4] (one image per run), scores [N, K] / [K], and optionally
  classes [N, K] / [K]; scores may also be per class, [N, K, C] / [K, C] (score = the highest,
  class = its index);
- rows: one output [N, K, 6] / [K, 6] of x1, y1, x2, y2, score, class (or 5 columns, no class).

On each image, the boxes scoring >= 0.25 on each side are matched one to one, greedily by
IoU >= 0.5 and the same class (`boxes.match`), the original's boxes taken as truth. Summed over
images, with m matched of n_ref original and n_cand variant boxes:

    precision = m / n_cand,   recall = m / n_ref,   f1 = 2 m / (n_ref + n_cand)

The default budget is f1 >= 0.95: one number in which a lost box and an added one weigh alike.
With labels (a .json list per sample of [x1, y1, x2, y2, class] rows in the model's box
coordinates) each model's mAP@0.5 over its boxes scoring >= 0.001 (`boxes.ApTally`):
map50_reference, map50_candidate and map50_drop = reference - candidate (points). Without a
classes output every box is class 0 and the labels' classes are not read. The drill-down lists
the images with the most boxes lost or added, naming them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from optistudio.core.errors import DataMismatch
from optistudio.core.numerics.evaluators.base import (
    Disagreement,
    Evaluator,
    EvaluatorInfo,
    MetricInfo,
    ModelFacts,
    OutputFacts,
    Recognition,
    TaskScore,
    TaskTally,
)
from optistudio.core.numerics.evaluators.boxes import (
    ApTally,
    MatchCounts,
    match,
    read_box_labels,
)
from optistudio.core.numerics.evaluators.outputs import (
    checked,
    is_float,
    named_like,
    shape_text,
    size,
)
from optistudio.core.numerics.evaluators.tallying import BaseTally, check_rank

SCORE_THRESHOLD = 0.25
MAP_MIN_SCORE = 0.001
ROW_COLUMNS = {5: "x1, y1, x2, y2, score", 6: "x1, y1, x2, y2, score, class"}
SHOWN_BOXES = 3
BOX_SHAPES = "[N, K, 4] or [K, 4]"

METRICS = [
    MetricInfo(
        name="f1",
        label="Box F1",
        higher_is_better=True,
        description="2 x matched / (original's boxes + variant's boxes), boxes scoring >= 0.25 "
        "matched by IoU >= 0.5 and class.",
    ),
    MetricInfo(
        name="precision",
        label="Box precision",
        higher_is_better=True,
        description="Fraction of the variant's boxes that match one of the original's.",
    ),
    MetricInfo(
        name="recall",
        label="Box recall",
        higher_is_better=True,
        description="Fraction of the original's boxes that the variant finds too.",
    ),
    MetricInfo(
        name="map50_reference",
        label="mAP@0.5 (original)",
        higher_is_better=True,
        needs_labels=True,
        description="Mean over labelled classes of the original's AP at IoU 0.5.",
    ),
    MetricInfo(
        name="map50_candidate",
        label="mAP@0.5 (variant)",
        higher_is_better=True,
        needs_labels=True,
        description="Mean over labelled classes of the variant's AP at IoU 0.5.",
    ),
    MetricInfo(
        name="map50_drop",
        label="mAP@0.5 drop",
        higher_is_better=False,
        unit="points",
        needs_labels=True,
        description="Original minus variant mAP@0.5 (0.01 = 1 point).",
    ),
]


class DetectionBoxesEvaluator(Evaluator):
    """Boxes matched by IoU between the variant and the original, or mAP@0.5 with labels."""

    def recognize(self, facts: ModelFacts) -> Recognition | None:
        for find in (_split_layout, _rows_layout):
            found = find(facts)
            if found is not None:
                outputs, reason = found
                return Recognition(task=self.info.name, reason=reason, outputs=outputs)
        return None

    def for_outputs(self, facts: ModelFacts, outputs: list[str] | None = None) -> Recognition:
        chosen = super().for_outputs(facts, outputs)
        picked = chosen.outputs[:3]
        why_not = _why_not_rows if len(picked) == 1 else _why_not_split(picked)
        checked(self.info.name, facts, picked, why_not)
        return chosen.model_copy(update={"outputs": picked})

    def tally(self, recognition: Recognition, labels: Any | None = None) -> TaskTally:
        return BoxesTally(recognition.outputs, labels)

    def read_labels(self, path: Path, *, samples: int) -> list[np.ndarray]:
        """Label boxes: a .json list per sample of [x1, y1, x2, y2, class] rows."""
        return read_box_labels(path, samples=samples)


def _split_layout(facts: ModelFacts) -> tuple[list[str], str] | None:
    """Boxes, scores and maybe classes as separate outputs, found by name and shape."""
    boxes = _box_output(facts)
    if boxes is None:
        return None
    rank = len(boxes.shape)
    scores = _partner(facts, rank, ("score", "conf", "prob"), per_class=True)
    if scores is None:
        return None
    classes = _partner(facts, rank, ("label", "class"), exclude=scores)
    picked = [boxes, scores] + ([classes] if classes is not None else [])
    letters = "NKC" if rank == 3 else "KC"  # unbatched: one image's K boxes per run
    described = " and ".join(f"{o.name} {shape_text(o.shape, letters)}" for o in picked)
    return [o.name for o in picked], (
        f"{described}: boxes (x1, y1, x2, y2) with scores"
        f"{' and classes' if classes is not None else ''}: an object detector"
    )


def _box_output(facts: ModelFacts) -> OutputFacts | None:
    fours = [
        o
        for o in facts.outputs
        if len(o.shape) in (2, 3) and size(o.shape[-1]) == 4 and is_float(o)
    ]
    named = [o for o in fours if named_like(o, "box")]
    if named:
        return named[0]
    # unnamed: only a batched [N, K, 4], and only one (an [N, 4] may be four class scores)
    return fours[0] if len(fours) == 1 and len(fours[0].shape) == 3 else None


def _partner(
    facts: ModelFacts,
    rank: int,
    words: tuple[str, ...],
    *,
    per_class: bool = False,
    exclude: OutputFacts | None = None,
) -> OutputFacts | None:
    """An output named like `words` with one axis less than the boxes (or, `per_class`, as
    many: a score per class)."""
    for output in facts.outputs:
        if output is exclude or not named_like(output, *words) or named_like(output, "box"):
            continue
        if len(output.shape) == rank - 1 or (per_class and len(output.shape) == rank):
            return output
    return None


def _rows_layout(facts: ModelFacts) -> tuple[list[str], str] | None:
    """One output of rows x1, y1, x2, y2, score(, class)."""
    for output in facts.outputs:
        columns = size(output.shape[-1]) if len(output.shape) in (2, 3) else None
        if columns not in ROW_COLUMNS or not is_float(output):
            continue
        named = named_like(output, "box", "det")
        if named or (len(output.shape) == 3 and columns == 6 and "Softmax" not in output.producer):
            return [output.name], (
                f"{output.name} {shape_text(output.shape, 'NK')} read as rows of "
                f"{ROW_COLUMNS[columns]}: an object detector"
            )
    return None


def _why_not_rows(output: OutputFacts) -> str | None:
    columns = size(output.shape[-1])
    if len(output.shape) not in (2, 3) or (columns is not None and columns not in ROW_COLUMNS):
        return "one output must be rows [N, K, 6] or [K, 6] of x1, y1, x2, y2, score, class"
    return None


def _why_not_split(picked: list[str]) -> Callable[[OutputFacts], str | None]:
    """The check of separate outputs: boxes [N, K, 4] / [K, 4] first, then scores with one
    axis less (or a score per class: as many), then maybe classes."""
    ranks: dict[int, int] = {}

    def why_not(output: OutputFacts) -> str | None:
        place = picked.index(output.name)
        ranks[place] = len(output.shape)
        if place == 0:
            wrong = ranks[0] not in (2, 3) or size(output.shape[-1]) not in (4, None)
        else:
            wrong = 0 in ranks and ranks[place] not in (ranks[0] - 1, ranks[0])
        if wrong:
            return f"the outputs go boxes first ({BOX_SHAPES}), then scores and classes"
        return None

    return why_not


class _Detections:
    """One image's boxes [K, 4], scores [K] and classes [K] (0 when the model has none)."""

    def __init__(self, boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray) -> None:
        self.boxes = boxes.astype(np.float64).reshape(-1, 4)
        self.scores = np.nan_to_num(scores.astype(np.float64).reshape(-1), nan=0.0)
        self.classes = np.nan_to_num(classes.reshape(-1).astype(np.float64), nan=-1).astype(
            np.int64
        )

    def above(self, threshold: float) -> _Detections:
        keep = (self.scores >= threshold) & (self.classes >= 0)
        return _Detections(self.boxes[keep], self.scores[keep], self.classes[keep])

    def describe(self, index: int) -> str:
        x1, y1, x2, y2 = (f"{value:.4g}" for value in self.boxes[index])
        return f"class {self.classes[index]} ({self.scores[index]:.2f}) at [{x1}, {y1}, {x2}, {y2}]"


class BoxesTally(BaseTally):
    """Matched and total box counts (and AP histograms with labels); worst images kept."""

    task = "detection_boxes"

    def __init__(self, outputs: list[str], labels: list[np.ndarray] | None = None) -> None:
        super().__init__(labels)
        self.outputs = outputs
        self.counts = MatchCounts()
        self.ap = {"reference": ApTally(), "candidate": ApTally()}
        self.has_classes = True

    def add(
        self,
        reference: dict[str, np.ndarray],
        candidate: dict[str, np.ndarray],
        *,
        first_sample: int,
    ) -> None:
        ref_images, cand_images = self._images(reference), self._images(candidate)
        if len(ref_images) != len(cand_images):
            raise DataMismatch(
                f"The original gave boxes for {len(ref_images)} images and the variant for "
                f"{len(cand_images)}; they cannot be compared."
            )
        labels = None if self.labels is None else self.labels_for(first_sample, len(ref_images))
        for row, (ref, cand) in enumerate(zip(ref_images, cand_images, strict=True)):
            label = None if labels is None else labels[row]
            self._add_image(first_sample + row, ref, cand, label)
        self.samples += len(ref_images)

    def _images(self, outputs: dict[str, np.ndarray]) -> list[_Detections]:
        arrays = [np.asarray(outputs[name]) for name in self._checked_names(outputs)]
        if len(arrays) == 1:
            return self._rows(arrays[0])
        boxes, scores = arrays[0], arrays[1]
        check_rank(boxes, self.outputs[0], 2, 3)
        if scores.ndim == boxes.ndim:  # a score per class
            classes, scores = scores.argmax(axis=-1), scores.max(axis=-1)
            self.has_classes = True
        else:
            classes = arrays[2] if len(arrays) > 2 else np.zeros(scores.shape, np.int64)
            self.has_classes = len(arrays) > 2
        if boxes.ndim == 2:
            return [_Detections(boxes, scores, classes)]
        return [_Detections(*parts) for parts in zip(boxes, scores, classes, strict=True)]

    def _checked_names(self, outputs: dict[str, np.ndarray]) -> list[str]:
        for name in self.outputs:
            if name not in outputs:
                raise DataMismatch(
                    f"The model gave no output {name!r}; it gave {', '.join(outputs)}."
                )
        return self.outputs

    def _rows(self, rows: np.ndarray) -> list[_Detections]:
        check_rank(rows, self.outputs[0], 2, 3)
        if rows.shape[-1] not in ROW_COLUMNS:
            raise DataMismatch(
                f"Output {self.outputs[0]!r} has rows of {rows.shape[-1]} values; detection rows "
                "are x1, y1, x2, y2, score and maybe class (5 or 6 values)."
            )
        self.has_classes = rows.shape[-1] == 6
        images = rows if rows.ndim == 3 else rows[None]
        return [
            _Detections(
                image[:, :4],
                image[:, 4],
                image[:, 5] if self.has_classes else np.zeros(len(image)),
            )
            for image in images
        ]

    def _add_image(
        self, sample: int, ref: _Detections, cand: _Detections, label: np.ndarray | None
    ) -> None:
        ref_kept, cand_kept = ref.above(SCORE_THRESHOLD), cand.above(SCORE_THRESHOLD)
        pairs = match(ref_kept.boxes, cand_kept.boxes, ref_kept.classes, cand_kept.classes)
        self.counts.add(len(pairs), len(ref_kept.scores), len(cand_kept.scores))
        if label is not None:
            truth = (
                label if self.has_classes else np.hstack([label[:, :4], np.zeros((len(label), 1))])
            )
            for side, found in (("reference", ref), ("candidate", cand)):
                found = found.above(MAP_MIN_SCORE)
                self.ap[side].add(found.boxes, found.scores, found.classes, truth)
        self._offer(sample, ref_kept, cand_kept, pairs, label)

    def _offer(
        self,
        sample: int,
        ref: _Detections,
        cand: _Detections,
        pairs: list[tuple[int, int]],
        label: np.ndarray | None,
    ) -> None:
        lost = sorted(set(range(len(ref.scores))) - {r for r, _ in pairs})
        added = sorted(set(range(len(cand.scores))) - {c for _, c in pairs})
        severity = float(len(lost) + len(added))
        if not severity:
            return
        self.worst.offer(
            severity,
            lambda: Disagreement(
                sample=sample,
                reference=f"{len(ref.scores)} boxes" + _listed("lost", ref, lost),
                candidate=f"{len(cand.scores)} boxes" + _listed("added", cand, added),
                label=None if label is None else f"{len(label)} labelled boxes",
                severity=severity,
            ),
        )

    def score(self) -> TaskScore:
        if self.samples == 0:
            return self.finished({})
        metrics = {
            "f1": self.counts.f1(),
            "precision": self.counts.precision(),
            "recall": self.counts.recall(),
        }
        if self.labels is not None:
            reference, candidate = (self.ap[side].mean_ap() for side in ("reference", "candidate"))
            metrics |= {
                "map50_reference": reference,
                "map50_candidate": candidate,
                "map50_drop": reference - candidate,
            }
        return self.finished(metrics, self._note())

    def _note(self) -> str:
        parts = [
            f"boxes scoring >= {SCORE_THRESHOLD} matched by IoU >= 0.5"
            + (" and class" if self.has_classes else ""),
            f"{self.counts.ref} original and {self.counts.cand} variant boxes, "
            f"{self.counts.matched} matched",
        ]
        if self.labels is not None:
            parts.append("mAP@0.5 against the given labels")
        return "; ".join(parts)


def image_detections(outputs: list[str], arrays: dict[str, np.ndarray]) -> list[_Detections]:
    """Each image's boxes, scores and classes in a detector's `arrays`, read the way the
    tally reads them (`outputs`: the recognition's picked output names, in its order)."""
    return BoxesTally(outputs)._images(arrays)


def _listed(what: str, found: _Detections, indices: list[int]) -> str:
    """'; lost class 2 (0.71) at [10, 20, 50, 80], ... and 3 more'."""
    if not indices:
        return ""
    shown = ", ".join(found.describe(index) for index in indices[:SHOWN_BOXES])
    more = len(indices) - SHOWN_BOXES
    return f"; {what} {shown}" + (f" and {more} more" if more > 0 else "")


DETECTION_BOXES = EvaluatorInfo(
    name="detection_boxes",
    label="Object detection (boxes)",
    description="Judges a detector by the boxes it finds: boxes scoring 0.25 or more matched "
    "one to one by IoU >= 0.5 (and class) against the original's, giving precision, recall and "
    "F1; with labelled boxes each model's mAP@0.5 and the drop. The drill-down lists the images "
    "with boxes lost or added.",
    metrics=METRICS,
    default_budget={"f1": 0.95},
    labels_budget={"map50_drop": 0.005},
    implementation="optistudio.core.numerics.evaluators.detection_boxes:DetectionBoxesEvaluator",
    priority=20,
)
