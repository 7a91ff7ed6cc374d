"""Semantic segmentation: a variant judged by the class map it paints.

The judged output holds class scores [N, K, H, W] (K > 1 classes, the input image's size);
each model's map is the argmax over K per pixel. With R and C the original's and the variant's
maps over every pixel of every sample, per class k:

    IoU_k = |{R = k} ∩ {C = k}| / |{R = k} ∪ {C = k}|
    miou  = mean of IoU_k over the classes present in either map   (default budget: >= 0.95)
    pixel_agreement = fraction of pixels where R == C

The intersections and unions are summed over the whole data before dividing (the usual
dataset mIoU), so memory is two counts per class. With labels (a .npy [N, H, W] of class ids;
values outside [0, K), such as 255, are ignored pixels) each model's mIoU against them over the
classes labelled or predicted, and miou_drop = miou_reference - miou_candidate (points). The
drill-down lists the samples whose own mIoU (candidate vs original) is lowest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from optistudio.core.errors import DataMismatch
from optistudio.core.numerics.evaluators.base import (
    Disagreement,
    EvaluatorInfo,
    MetricInfo,
    ModelFacts,
    OutputFacts,
    Recognition,
    TaskScore,
    TaskTally,
)
from optistudio.core.numerics.evaluators.outputs import (
    OneOutputEvaluator,
    made_by,
    same_spatial,
    shape_text,
    size,
)
from optistudio.core.numerics.evaluators.tallying import BaseTally, check_rank, pair

METRICS = [
    MetricInfo(
        name="miou",
        label="mIoU vs original",
        higher_is_better=True,
        description="Mean over classes of the IoU of the variant's argmax map with the "
        "original's (classes present in either).",
    ),
    MetricInfo(
        name="pixel_agreement",
        label="Pixel agreement",
        higher_is_better=True,
        description="Fraction of pixels whose argmax class is the original's.",
    ),
    MetricInfo(
        name="miou_reference",
        label="mIoU vs labels (original)",
        higher_is_better=True,
        needs_labels=True,
        description="The original's mIoU against the label maps.",
    ),
    MetricInfo(
        name="miou_candidate",
        label="mIoU vs labels (variant)",
        higher_is_better=True,
        needs_labels=True,
        description="The variant's mIoU against the label maps.",
    ),
    MetricInfo(
        name="miou_drop",
        label="mIoU drop",
        higher_is_better=False,
        unit="points",
        needs_labels=True,
        description="Original minus variant mIoU against the labels (0.01 = 1 point).",
    ),
]


def _why_not(output: OutputFacts) -> str | None:
    if len(output.shape) != 4:
        return "class scores are [N, K, H, W]"
    return "it has a single class" if size(output.shape[1]) == 1 else None


class SegmentationEvaluator(OneOutputEvaluator):
    """mIoU and pixel agreement of the argmax maps, mIoU against label maps."""

    why_not = staticmethod(_why_not)

    def recognize(self, facts: ModelFacts) -> Recognition | None:
        for output in facts.outputs:
            classes = size(output.shape[1]) if len(output.shape) == 4 else None
            if classes is None or classes < 2 or not same_spatial(output.shape, facts):
                continue
            return Recognition(
                task=self.info.name,
                reason=f"{output.name} {shape_text(output.shape, 'NKHW')} after "
                f"{made_by(output)}, the size of the input image: scores of {classes} classes "
                "per pixel, a segmentation",
                outputs=[output.name],
            )
        return None

    def tally(self, recognition: Recognition, labels: Any | None = None) -> TaskTally:
        return SegmentationTally(recognition.outputs[0], labels)

    def read_labels(self, path: Path, *, samples: int) -> np.ndarray:
        """Label maps: a .npy [N, H, W] of class ids (memory-mapped, read a batch at a time)."""
        path = Path(path)
        try:
            labels = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError):
            labels = None
        if labels is None or labels.ndim != 3 or labels.dtype.kind not in "iub":
            raise DataMismatch(
                f"The labels file {path.name} is not a .npy array [N, H, W] of class ids.",
                hint="Save the label maps with numpy.save as integers, one map per sample.",
            )
        if len(labels) != samples:
            raise DataMismatch(
                f"labels have {len(labels)} maps but the data has {samples} samples.",
                hint="Give exactly one label map per sample, in the data's order.",
            )
        return labels


class _ClassOverlap:
    """Per-class intersection and union counts of two class maps."""

    def __init__(self) -> None:
        self.inter = np.zeros(0, np.int64)
        self.union = np.zeros(0, np.int64)

    def add(self, a: np.ndarray, b: np.ndarray, classes: int) -> None:
        inter, union = class_overlap(a, b, classes)
        if len(self.inter) < classes:
            grow = classes - len(self.inter)
            self.inter = np.concatenate([self.inter, np.zeros(grow, np.int64)])
            self.union = np.concatenate([self.union, np.zeros(grow, np.int64)])
        self.inter[:classes] += inter
        self.union[:classes] += union

    def miou(self) -> float:
        present = self.union > 0
        return float(np.mean(self.inter[present] / self.union[present])) if present.any() else 1.0


def class_overlap(a: np.ndarray, b: np.ndarray, classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Per class k < `classes`: |{a = k} ∩ {b = k}| and |{a = k} ∪ {b = k}|, over pixels where
    both are valid classes (a label's 255 and such are left out)."""
    valid = (a >= 0) & (a < classes) & (b >= 0) & (b < classes)
    a, b = a[valid].astype(np.int64), b[valid].astype(np.int64)
    inter = np.bincount(a[a == b], minlength=classes)
    union = np.bincount(a, minlength=classes) + np.bincount(b, minlength=classes) - inter
    return inter, union


class SegmentationTally(BaseTally):
    """Per-class overlap counts (against the original, and each model against the labels)."""

    task = "segmentation"

    def __init__(self, output: str, labels: np.ndarray | None = None) -> None:
        super().__init__(labels)
        self.output = output
        self.overlap = _ClassOverlap()
        self.against_labels = {"reference": _ClassOverlap(), "candidate": _ClassOverlap()}
        self.pixels = 0
        self.same = 0

    def add(
        self,
        reference: dict[str, np.ndarray],
        candidate: dict[str, np.ndarray],
        *,
        first_sample: int,
    ) -> None:
        ref, cand = pair(reference, candidate, self.output)
        check_rank(ref, self.output, 4)
        classes = ref.shape[1]
        ref_map, cand_map = ref.argmax(axis=1), cand.argmax(axis=1)
        self.overlap.add(ref_map, cand_map, classes)
        self.pixels += ref_map.size
        self.same += int(np.count_nonzero(ref_map == cand_map))
        if self.labels is not None:
            self._add_labels(
                np.asarray(self.labels_for(first_sample, len(ref))), ref_map, cand_map, classes
            )
        for row in range(len(ref)):
            self._offer(first_sample + row, ref_map[row], cand_map[row], classes)
        self.samples += len(ref)

    def _add_labels(
        self, labels: np.ndarray, ref_map: np.ndarray, cand_map: np.ndarray, classes: int
    ) -> None:
        if labels.shape != ref_map.shape:
            raise DataMismatch(
                f"The label maps are {list(labels.shape[1:])} but the model's maps are "
                f"{list(ref_map.shape[1:])}.",
                hint="Give label maps the size of the model's output.",
            )
        self.against_labels["reference"].add(labels, ref_map, classes)
        self.against_labels["candidate"].add(labels, cand_map, classes)

    def _offer(self, sample: int, ref: np.ndarray, cand: np.ndarray, classes: int) -> None:
        inter, union = class_overlap(ref, cand, classes)
        present = union > 0
        miou = float(np.mean(inter[present] / union[present])) if present.any() else 1.0
        changed = int(np.count_nonzero(ref != cand))
        self.worst.offer(
            1.0 - miou,
            lambda: Disagreement(
                sample=sample,
                reference=f"classes {_classes_in(ref)}",
                candidate=f"classes {_classes_in(cand)}; {changed} pixels "
                f"({changed / ref.size:.1%}) changed, mIoU {miou:.3f}",
                severity=1.0 - miou,
            ),
        )

    def score(self) -> TaskScore:
        if self.samples == 0:
            return self.finished({})
        metrics = {"miou": self.overlap.miou(), "pixel_agreement": self.same / self.pixels}
        if self.labels is not None:
            reference = self.against_labels["reference"].miou()
            candidate = self.against_labels["candidate"].miou()
            metrics |= {
                "miou_reference": reference,
                "miou_candidate": candidate,
                "miou_drop": reference - candidate,
            }
        note = "argmax maps; mIoU over the classes present in either map"
        return self.finished(metrics, note)


def _classes_in(class_map: np.ndarray, shown: int = 8) -> str:
    """'0, 3, 7' (the classes a map paints, most pixels first; '...' past `shown`)."""
    values, counts = np.unique(class_map, return_counts=True)
    ordered = values[np.argsort(-counts, kind="stable")]
    text = ", ".join(str(int(value)) for value in ordered[:shown])
    return text + (", ..." if len(ordered) > shown else "")


SEGMENTATION = EvaluatorInfo(
    name="segmentation",
    label="Semantic segmentation",
    description="Judges a segmentation model by its argmax class maps: the mean IoU over "
    "classes of the variant's map with the original's, and the fraction of pixels that agree; "
    "with label maps each model's mIoU and the drop. The drill-down lists the samples with the "
    "lowest mIoU.",
    metrics=METRICS,
    default_budget={"miou": 0.95},
    labels_budget={"miou_drop": 0.01},
    implementation="optistudio.core.numerics.evaluators.segmentation:SegmentationEvaluator",
    priority=40,
    input_kinds=("image",),
)
