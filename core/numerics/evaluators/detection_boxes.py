"""Object detection: a variant judged by the boxes it finds, matched to the original's by IoU.

Outputs are picked by `box_recognition` and read, in the layout the arrays a run returns are in,
by `box_layouts` (corners x1, y1, x2, y2 with a score and a class): NMS rows of 5, 6 or 7 values,
raw YOLO predictions [N, anchors, 5 + C] (YOLOv5 / YOLOX) or [N, 4 + C, anchors] (YOLOv8 / v11),
boxes with scores (and classes) as separate outputs, or PicoDet-style per-head scores and box
distributions. Raw predictions are decoded and suppressed by NMS as a deployment would.

On each image, the boxes scoring >= 0.25 on each side are matched one to one, greedily by
IoU >= 0.5 and the same class (`boxes.match`), the original's boxes taken as truth. Summed over
images, with m matched of n_ref original and n_cand variant boxes:

    precision = m / n_cand,   recall = m / n_ref,   f1 = 2 m / (n_ref + n_cand)

The default budget is f1 >= 0.95: one number in which a lost box and an added one weigh alike.
With labels (a .json list per sample of [x1, y1, x2, y2, class] rows in the model's box
coordinates) each model's mAP@0.5 over its boxes scoring >= 0.001 (`boxes.ApTally`):
map50_reference, map50_candidate and map50_drop = reference - candidate (points). Without
classes every box is class 0 and the labels' classes are not read. The note names the layout
read (and what it assumed); the drill-down lists the images with the most boxes lost or added.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from optistudio.core.errors import DataMismatch, OutputsDiffer
from optistudio.core.numerics.evaluators.base import (
    Case,
    Disagreement,
    Evaluator,
    EvaluatorInfo,
    FedSamplesTally,
    MetricInfo,
    ModelFacts,
    Recognition,
    TaskScore,
    TaskTally,
)
from optistudio.core.numerics.evaluators.box_layouts import (
    LAYOUTS,
    Detections,
    Layout,
    check_alike,
    detect_layout,
    has_classes,
    read_images,
)
from optistudio.core.numerics.evaluators.box_recognition import (
    detector_outputs,
    heads_layout,
    raw_layout,
    why_not_for,
)
from optistudio.core.numerics.evaluators.boxes import (
    ApTally,
    MatchCounts,
    match,
    read_box_labels,
)
from optistudio.core.numerics.evaluators.evidence import STRONG, Evidence
from optistudio.core.numerics.evaluators.input_kinds import fixed_image_size
from optistudio.core.numerics.evaluators.label_metadata import label_evidence
from optistudio.core.numerics.evaluators.outputs import checked, output_named, size
from optistudio.core.numerics.evaluators.tallying import BaseTally

SCORE_THRESHOLD = 0.25
AFTER_NMS = frozenset({"rows", "indexed_rows", "split"})
"""Layouts of boxes the model's own NMS kept: sets, whose rows may come in another order, so the
numeric floor (optistudio.core.numerics.numeric_floor) leaves them to the box metrics."""
MAP_MIN_SCORE = 0.001
SHOWN_BOXES = 3

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
        found = detector_outputs(facts)
        if found is None:
            return None
        outputs, reason = found
        return Recognition(
            task=self.info.name,
            reason=reason,
            outputs=outputs,
            image_size=fixed_image_size(facts),
        )

    def weigh(self, facts: ModelFacts) -> Case | None:
        """The layout found is STRONG; label names in the metadata count for (one per class
        score) or against (another count) where the outputs' shapes give the class count."""
        found = self.recognize(facts)
        if found is None:
            return None
        evidence = [Evidence(kind="structure", weight=STRONG, text=found.reason)]
        evidence += label_evidence(facts, _class_count(facts, found.outputs))
        return Case(recognition=found, evidence=evidence)

    def for_outputs(self, facts: ModelFacts, outputs: list[str] | None = None) -> Recognition:
        chosen = super().for_outputs(facts, outputs)
        heads = len(chosen.outputs) > 3 and len(chosen.outputs) % 2 == 0
        picked = chosen.outputs if heads else chosen.outputs[:3]
        checked(self.info.name, facts, picked, why_not_for(facts, picked))
        return chosen.model_copy(update={"outputs": picked, "image_size": fixed_image_size(facts)})

    def tally(self, recognition: Recognition, labels: Any | None = None) -> TaskTally:
        return BoxesTally(recognition.outputs, labels, image_size=recognition.image_size)

    def read_labels(self, path: Path, *, samples: int) -> list[np.ndarray]:
        """Label boxes: a .json list per sample of [x1, y1, x2, y2, class] rows."""
        return read_box_labels(path, samples=samples)


def _class_count(facts: ModelFacts, outputs: list[str]) -> int | None:
    """How many classes the picked outputs score, where their declared shapes say: a head's
    class scores beside its cell count (PicoDet), raw predictions' values past the box and the
    objectness (YOLO); None for other layouts or dynamic sizes."""
    heads, raw = heads_layout(facts), raw_layout(facts)
    if heads is not None and heads[0] == outputs:
        scores, boxes = (output_named(facts, name) for name in outputs[:2])
        dims, cells = [size(d) for d in scores.shape[1:]], [size(d) for d in boxes.shape[1:]]
        rest = [dim for dim in dims if dim not in cells]
        return rest[0] if len(rest) == 1 else None
    if raw is not None and raw[0] == outputs:
        middle, last = (size(dim) for dim in output_named(facts, outputs[0]).shape[1:])
        if middle is None or last is None:
            return None
        return middle - 4 if last > middle else last - 5
    return None


class BoxesTally(FedSamplesTally, BaseTally):
    """Matched and total box counts (and AP histograms with labels); worst images kept. The
    layout is read from the original's first batch and both models are read in it."""

    task = "detection_boxes"

    def __init__(
        self,
        outputs: list[str],
        labels: list[np.ndarray] | None = None,
        *,
        image_size: tuple[int, int] | None = None,
    ) -> None:
        super().__init__(labels)
        self.outputs = outputs
        self.image_size = image_size
        self.counts = MatchCounts()
        self.ap = {"reference": ApTally(), "candidate": ApTally()}
        self.layout: Layout | None = None
        self.has_classes = True
        self.min_score = SCORE_THRESHOLD if labels is None else MAP_MIN_SCORE

    def add_fed(
        self,
        reference: dict[str, np.ndarray],
        candidate: dict[str, np.ndarray],
        first_sample: int,
        samples: int | None,
    ) -> None:
        ref_arrays, cand_arrays = self.arrays(reference), self.arrays(candidate)
        layout = self.read_layout(ref_arrays)
        check_alike(layout, ref_arrays, cand_arrays)
        ref_images, cand_images = (
            read_images(
                layout,
                arrays,
                samples=samples,
                min_score=self.min_score,
                image_size=self.image_size,
            )
            for arrays in (ref_arrays, cand_arrays)
        )
        if len(ref_images) != len(cand_images):
            raise OutputsDiffer(
                f"The original gave boxes for {len(ref_images)} images and the variant for "
                f"{len(cand_images)}; they cannot be compared.",
                hint="The variant, not your data, is at fault: use another variant.",
            )
        labels = None if self.labels is None else self.labels_for(first_sample, len(ref_images))
        for row, (ref, cand) in enumerate(zip(ref_images, cand_images, strict=True)):
            label = None if labels is None else labels[row]
            self._add_image(first_sample + row, ref, cand, label)
        self.samples += len(ref_images)

    def read_layout(self, arrays: list[np.ndarray]) -> Layout:
        """The layout of the outputs, read on the first batch and kept."""
        if self.layout is None:
            self.layout = detect_layout(arrays, self.outputs)
            self.has_classes = has_classes(self.layout, arrays)
        return self.layout

    def arrays(self, outputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The picked outputs' arrays, in the recognition's order."""
        for name in self.outputs:
            if name not in outputs:
                raise DataMismatch(
                    f"The model gave no output {name!r}; it gave {', '.join(outputs)}."
                )
        return [np.asarray(outputs[name]) for name in self.outputs]

    def _add_image(
        self, sample: int, ref: Detections, cand: Detections, label: np.ndarray | None
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
        ref: Detections,
        cand: Detections,
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
        exempt = self.outputs if self.layout in AFTER_NMS else []
        return self.finished(metrics, self._note(), floor_exempt=exempt)

    def _note(self) -> str:
        parts = [
            f"read as {LAYOUTS[self.layout]}" if self.layout else "no outputs read",
            f"boxes scoring >= {SCORE_THRESHOLD} matched by IoU >= 0.5"
            + (" and class" if self.has_classes else ""),
            f"{self.counts.ref} original and {self.counts.cand} variant boxes, "
            f"{self.counts.matched} matched",
        ]
        if self.labels is not None:
            parts.append("mAP@0.5 against the given labels")
        return "; ".join(parts)


def image_detections(
    outputs: list[str],
    arrays: dict[str, np.ndarray],
    *,
    image_size: tuple[int, int] | None = None,
) -> list[Detections]:
    """Each image's boxes, scores and classes in a detector's `arrays`, read the way the
    tally reads them (`outputs`: the recognition's picked output names, in its order; raw
    predictions decoded and suppressed by NMS; `image_size`: the input's height and width,
    where PicoDet-style heads' cells sit)."""
    tally = BoxesTally(outputs, image_size=image_size)
    found = tally.arrays(arrays)
    return read_images(
        tally.read_layout(found),
        found,
        samples=None,
        min_score=SCORE_THRESHOLD,
        image_size=image_size,
    )


def _listed(what: str, found: Detections, indices: list[int]) -> str:
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
    "F1; with labelled boxes each model's mAP@0.5 and the drop. Reads NMS rows (x1, y1, x2, y2, "
    "score, class; or batch index, x1, y1, x2, y2, class, score), raw YOLO predictions "
    "([N, anchors, 5 + classes] read with objectness as YOLOv5 / YOLOX, [N, 4 + classes, "
    "anchors] without as YOLOv8 / v11: the smaller axis holds the values), separate boxes and "
    "scores, and PicoDet-style heads (grids of the input's height and width / stride; square "
    "ones at strides 8, 16, 32, ... when the size is not fixed); raw "
    "predictions are decoded and suppressed by NMS (IoU 0.45) first. The drill-down lists the "
    "images with boxes lost or added.",
    metrics=METRICS,
    default_budget={"f1": 0.95},
    labels_budget={"map50_drop": 0.005},
    implementation="optistudio.core.numerics.evaluators.detection_boxes:DetectionBoxesEvaluator",
    priority=20,
    input_kinds=("image",),
)
