"""Text detection by probability map (DB-style, PP-OCR det): a variant judged by the regions
its map marks, not by the map's raw values.

The judged output is one map [N, 1, H, W] after a Sigmoid, the size of the input image: the
probability that a pixel is text (or, beside other maps, a CenterNet-style detector's heatmap at
a stride of the input, such as CenterFace's; its thresholded regions judge it as fairly, and the
recognition's sentence says which it read). A cosine of two such maps is dominated by the many
near-zero background pixels and says little about what a detector returns, so both maps are
read as a detector's post-processing reads them: binarised at 0.3 (PP-OCR's `thresh`), with
A_i and B_i the original's and the variant's text pixels in sample i,

    map_iou = mean_i |A_i ∩ B_i| / |A_i ∪ B_i|          (1 when both are empty)

and as boxes: the 8-connected components of each binarised map, kept when their mean
probability is >= 0.6 (PP-OCR's `box_thresh`) and the shorter side of their bounding box is
>= 3 pixels (its `min_size`), compared as bounding boxes (PP-OCR's polygon unclipping is left
out: it grows both sides' boxes alike). Boxes matched one to one by IoU >= 0.5 (`boxes.match`)
give, summed over samples with the original's boxes as truth,

    box_precision = m / n_cand,   box_recall = m / n_ref,   box_f1 = 2 m / (n_ref + n_cand)

A pixel whose original probability lies within THRESHOLD_MARGIN (0.05) of the 0.3 threshold is
a near-tie (`near_ties`: the original all but split it): where the variant binarises it the
other way, the flip does not count. clear_map_iou and clear_box_f1 are map_iou and box_f1 with
the variant's map taking the original's value at those pixels. The default budget is
clear_box_f1 >= 0.95 and box_f1 >= 0.90 (near-tie flips can split or join a region, so they are
bounded too, more loosely). With labels (a .json list per sample of [x1, y1, x2, y2]
text boxes in the input image's pixels) each model's box F1 against them, and the drop. The
drill-down lists the samples with the lowest map IoU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

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
from optistudio.core.numerics.evaluators.boxes import MatchCounts, match, read_box_labels
from optistudio.core.numerics.evaluators.components import label_components
from optistudio.core.numerics.evaluators.near_ties import THRESHOLD_MARGIN
from optistudio.core.numerics.evaluators.outputs import (
    OneOutputEvaluator,
    image_input,
    same_spatial,
    shape_text,
    size,
)
from optistudio.core.numerics.evaluators.tallying import BaseTally, check_rank, pair

BINARY_THRESHOLD = 0.3
BOX_THRESHOLD = 0.6
MIN_SIDE = 3

METRICS = [
    MetricInfo(
        name="box_f1",
        label="Text box F1",
        higher_is_better=True,
        description="2 x matched / (original's + variant's text boxes), the boxes being the "
        "connected regions of the maps binarised at 0.3, matched by IoU >= 0.5.",
    ),
    MetricInfo(
        name="clear_box_f1",
        label="Text box F1 beyond near-ties",
        higher_is_better=True,
        description=f"Text box F1 with the variant's map taking the original's value where the "
        f"original's probability is within {THRESHOLD_MARGIN:g} of the 0.3 threshold.",
    ),
    MetricInfo(
        name="clear_map_iou",
        label="Map IoU beyond near-ties",
        higher_is_better=True,
        description="Map IoU with the flips at the original's near-tie pixels not counted.",
    ),
    MetricInfo(
        name="box_precision",
        label="Text box precision",
        higher_is_better=True,
        description="Fraction of the variant's text boxes that match one of the original's.",
    ),
    MetricInfo(
        name="box_recall",
        label="Text box recall",
        higher_is_better=True,
        description="Fraction of the original's text boxes the variant finds too.",
    ),
    MetricInfo(
        name="map_iou",
        label="Map IoU",
        higher_is_better=True,
        description="IoU of the text pixels (probability > 0.3) of the two maps, averaged "
        "over samples.",
    ),
    MetricInfo(
        name="box_f1_reference",
        label="Text box F1 vs labels (original)",
        higher_is_better=True,
        needs_labels=True,
        description="F1 of the original's text boxes against the labelled boxes.",
    ),
    MetricInfo(
        name="box_f1_candidate",
        label="Text box F1 vs labels (variant)",
        higher_is_better=True,
        needs_labels=True,
        description="F1 of the variant's text boxes against the labelled boxes.",
    ),
    MetricInfo(
        name="box_f1_drop",
        label="Text box F1 drop",
        higher_is_better=False,
        unit="points",
        needs_labels=True,
        description="Original minus variant box F1 against the labels (0.01 = 1 point).",
    ),
]


def _why_not(output: OutputFacts) -> str | None:
    if len(output.shape) not in (3, 4):
        return "a probability map is [N, 1, H, W] or [N, H, W]"
    if len(output.shape) == 4 and size(output.shape[1]) not in (1, None):
        return "a probability map has one channel"
    return None


class DetectionMapEvaluator(OneOutputEvaluator):
    """Binarised probability maps compared as pixels (IoU) and as boxes (F1)."""

    why_not = staticmethod(_why_not)

    def recognize(self, facts: ModelFacts) -> Recognition | None:
        for output in facts.outputs:
            shape = output.shape
            if len(shape) != 4 or size(shape[1]) != 1 or output.producer != "Sigmoid":
                continue
            if same_spatial(shape, facts):
                return Recognition(
                    task=self.info.name, reason=map_reason(output, facts), outputs=[output.name]
                )
        return None

    def tally(self, recognition: Recognition, labels: Any | None = None) -> TaskTally:
        return MapTally(recognition.outputs[0], labels)

    def read_labels(self, path: Path, *, samples: int) -> list[np.ndarray]:
        """Text boxes: a .json list per sample of [x1, y1, x2, y2] rows in image pixels."""
        return read_box_labels(path, samples=samples, classes=False)


def map_reason(output: OutputFacts, facts: ModelFacts) -> str:
    """What the map was read as, claiming only what the graph shows: the input image's size
    only when the dims say so (fixed and equal, or named as the input's), and a text map only
    when it is the model's one map (a heatmap beside other maps is a CenterNet-style
    detector's, such as CenterFace's faces with their scale and offset maps)."""
    shape = output.shape
    image = image_input(facts) or []
    spatial = zip(shape[2:], image[2:], strict=False)  # no image input: nothing to match
    sized = [ours == theirs and ours is not None for ours, theirs in spatial]
    where = (
        "the size of the input image"
        if len(sized) == 2 and all(sized)
        else "its height and width open"
    )
    others = [o.name for o in facts.outputs if o.name != output.name and len(o.shape) == 4]
    kind = (
        f"a heatmap beside {len(others)} other map(s) ({', '.join(others[:3])}): a "
        "CenterNet-style detector's, judged by the regions its heatmap marks"
        if others
        else "a DB-style text-detection probability map"
    )
    return f"{output.name} {shape_text(shape, 'NCHW')} after Sigmoid, {where}: {kind}"


def text_boxes(probability: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The text mask (probability > 0.3) of one map [H, W], and its boxes [M, 4] (x1, y1,
    x2, y2, exclusive ends) kept by PP-OCR's box threshold and minimum size."""
    probability = np.nan_to_num(probability.astype(np.float64), nan=0.0)
    mask = probability > BINARY_THRESHOLD
    labels, count = label_components(mask)
    if count == 0:
        return mask, np.zeros((0, 4))
    ys, xs = np.nonzero(labels)
    ids = labels[ys, xs] - 1
    pixels = np.bincount(ids, minlength=count)
    mean = np.bincount(ids, weights=probability[ys, xs], minlength=count) / pixels
    (x1, x2), (y1, y2) = _extent(ids, xs, count), _extent(ids, ys, count)
    boxes = np.stack([x1, y1, x2, y2], axis=1).astype(np.float64)
    sides = np.minimum(boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1])
    return mask, boxes[(mean >= BOX_THRESHOLD) & (sides >= MIN_SIDE)]


def _iou(ref: np.ndarray, cand: np.ndarray) -> float:
    """|ref ∩ cand| / |ref ∪ cand| of two masks; 1 when both are empty."""
    union = int(np.count_nonzero(ref | cand))
    return np.count_nonzero(ref & cand) / union if union else 1.0


def _extent(ids: np.ndarray, coordinate: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Per component: the lowest coordinate, and one past the highest."""
    low = np.full(count, np.iinfo(np.int64).max)
    high = np.full(count, -1)
    np.minimum.at(low, ids, coordinate)
    np.maximum.at(high, ids, coordinate)
    return low, high + 1


class MapTally(BaseTally):
    """Sums of per-sample map IoU and box match counts; the lowest-IoU samples kept."""

    task = "detection_map"

    def __init__(self, output: str, labels: list[np.ndarray] | None = None) -> None:
        super().__init__(labels)
        self.output = output
        self.iou_sum = 0.0
        self.counts = MatchCounts()
        self.clear_iou_sum = 0.0
        self.clear_counts = MatchCounts()
        self.near_flips = 0
        self.label_counts = {"reference": MatchCounts(), "candidate": MatchCounts()}

    def add(
        self,
        reference: dict[str, np.ndarray],
        candidate: dict[str, np.ndarray],
        *,
        first_sample: int,
    ) -> None:
        ref, cand = pair(reference, candidate, self.output)
        check_rank(ref, self.output, 3, 4)
        ref, cand = (
            ref.reshape(len(ref), *ref.shape[-2:]),
            cand.reshape(len(cand), *cand.shape[-2:]),
        )
        labels = None if self.labels is None else self.labels_for(first_sample, len(ref))
        for row in range(len(ref)):
            label = None if labels is None else labels[row][:, :4]
            self._add_sample(first_sample + row, ref[row], cand[row], label)
        self.samples += len(ref)

    def _add_sample(
        self, sample: int, ref: np.ndarray, cand: np.ndarray, label: np.ndarray | None
    ) -> None:
        (ref_mask, ref_boxes), (cand_mask, cand_boxes) = text_boxes(ref), text_boxes(cand)
        iou = _iou(ref_mask, cand_mask)
        self.iou_sum += iou
        matched = len(match(ref_boxes, cand_boxes))
        self.counts.add(matched, len(ref_boxes), len(cand_boxes))
        self._add_clear(ref, cand, ref_mask, ref_boxes)
        if label is not None:
            for side, boxes in (("reference", ref_boxes), ("candidate", cand_boxes)):
                self.label_counts[side].add(len(match(label, boxes)), len(label), len(boxes))
        self.worst.offer(
            1.0 - iou,
            lambda: Disagreement(
                sample=sample,
                reference=f"{len(ref_boxes)} text boxes, {int(ref_mask.sum())} text pixels",
                candidate=f"{len(cand_boxes)} text boxes ({matched} matched), "
                f"{int(cand_mask.sum())} text pixels, map IoU {iou:.3f}",
                label=None if label is None else f"{len(label)} labelled boxes",
                severity=1.0 - iou,
            ),
        )

    def _add_clear(
        self, ref: np.ndarray, cand: np.ndarray, ref_mask: np.ndarray, ref_boxes: np.ndarray
    ) -> None:
        """The sample again with the variant's near-tie flips undone (module docstring)."""
        near = np.abs(np.nan_to_num(ref.astype(np.float64)) - BINARY_THRESHOLD) < THRESHOLD_MARGIN
        flipped = near & (ref_mask != (np.nan_to_num(cand.astype(np.float64)) > BINARY_THRESHOLD))
        self.near_flips += int(np.count_nonzero(flipped))
        cand_mask, cand_boxes = text_boxes(np.where(flipped, ref, cand))
        self.clear_iou_sum += _iou(ref_mask, cand_mask)
        self.clear_counts.add(len(match(ref_boxes, cand_boxes)), len(ref_boxes), len(cand_boxes))

    def score(self) -> TaskScore:
        if self.samples == 0:
            return self.finished({})
        metrics = {
            "clear_box_f1": self.clear_counts.f1(),
            "clear_map_iou": self.clear_iou_sum / self.samples,
            "box_f1": self.counts.f1(),
            "box_precision": self.counts.precision(),
            "box_recall": self.counts.recall(),
            "map_iou": self.iou_sum / self.samples,
        }
        if self.labels is not None:
            reference = self.label_counts["reference"].f1()
            candidate = self.label_counts["candidate"].f1()
            metrics |= {
                "box_f1_reference": reference,
                "box_f1_candidate": candidate,
                "box_f1_drop": reference - candidate,
            }
        note = (
            f"maps binarised at {BINARY_THRESHOLD}; {self.counts.ref} original and "
            f"{self.counts.cand} variant text boxes, {self.counts.matched} matched; "
            f"{self.near_flips} pixel flips at the original's near-ties (within "
            f"{THRESHOLD_MARGIN:g} of {BINARY_THRESHOLD}) not counted in the clear metrics"
        )
        return self.finished(metrics, note)


DETECTION_MAP = EvaluatorInfo(
    name="detection_map",
    label="Text detection (probability map)",
    description="Judges a DB-style text detector (PP-OCR det) by the text regions its "
    "probability map marks: the IoU of the two maps binarised at 0.3, and their connected "
    "regions as boxes matched by IoU >= 0.5 (precision, recall, F1); with labelled text boxes "
    "each model's F1 and the drop. The drill-down lists the samples with the lowest map IoU.",
    metrics=METRICS,
    default_budget={"clear_box_f1": 0.95, "box_f1": 0.9},
    implementation="optistudio.core.numerics.evaluators.detection_map:DetectionMapEvaluator",
    priority=10,
    input_kinds=("image",),
)
