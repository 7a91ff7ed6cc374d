"""A detector's boxes per frame, after non-maximum suppression on that frame alone.

A video run on a detector (its outputs recognized as boxes by the `detection_boxes` evaluator:
boxes [N, K, 4] with scores [N, K] or [N, K, C] and maybe classes, or rows [N, K, 5 or 6]) gets
each frame's outputs back from the Pipeline already split off the batch, so suppression runs on
one frame of one stream at a time: boxes of different streams, or of different frames, never
suppress each other.

Non-maximum suppression, per class: boxes scoring below `SCORE_THRESHOLD` are dropped; of the
rest, in descending score order, a box is kept unless it overlaps an already kept box of its
class by IoU > `NMS_IOU` (`boxes.iou_matrix`). At most `MAX_BOXES` boxes are kept per frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from optistudio.core.numerics.evaluators.boxes import nms as suppress
from optistudio.core.numerics.evaluators.detection_boxes import (
    DETECTION_BOXES,
    SCORE_THRESHOLD,
    image_detections,
)
from optistudio.core.numerics.evaluators.recognize import model_facts

NMS_IOU = 0.45
MAX_BOXES = 300


@dataclass(frozen=True)
class FrameBoxes:
    """One frame's boxes kept by NMS: corners [M, 4], scores [M], classes [M]."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray

    def __len__(self) -> int:
        return len(self.scores)


def nms(
    boxes: np.ndarray,
    scores: np.ndarray,
    classes: np.ndarray,
    *,
    iou: float = NMS_IOU,
    min_score: float = SCORE_THRESHOLD,
    max_boxes: int = MAX_BOXES,
) -> np.ndarray:
    """Indices of the boxes kept (module docstring), best score first: those scoring at least
    `min_score`, through the accuracy check's own non-maximum suppression."""
    passed = np.flatnonzero(scores >= min_score)
    kept = suppress(boxes[passed], scores[passed], classes[passed], iou=iou, max_boxes=max_boxes)
    return passed[kept]


class BoxReader:
    """Reads a detector's per-frame outputs as `FrameBoxes` after NMS."""

    def __init__(self, output_names: list[str], picked: list[str], reason: str) -> None:
        self.positions = [output_names.index(name) for name in picked]
        self.picked, self.reason = picked, reason

    def __call__(self, outputs: list[np.ndarray]) -> FrameBoxes:
        """One frame's outputs (batch axis of 1) to its boxes kept by NMS."""
        arrays = {name: outputs[at] for name, at in zip(self.picked, self.positions, strict=True)}
        found = image_detections(self.picked, arrays)
        if not found:
            return FrameBoxes(np.zeros((0, 4)), np.zeros(0), np.zeros(0, np.int64))
        frame = found[0]
        keep = nms(frame.boxes, frame.scores, frame.classes)
        return FrameBoxes(frame.boxes[keep], frame.scores[keep], frame.classes[keep])

    def describe(self) -> str:
        return (
            f"{self.reason}; NMS per frame of each stream: IoU > {NMS_IOU:g} within a class "
            f"suppressed, boxes scoring < {SCORE_THRESHOLD:g} dropped"
        )


def box_reader(model_path: Path) -> BoxReader | None:
    """The reader of the model's boxes when its outputs look like a detector's; else None."""
    facts = model_facts(Path(model_path))
    found = DETECTION_BOXES.create().recognize(facts)
    if found is None:
        return None
    names = [output.name for output in facts.outputs]
    return BoxReader(names, found.outputs, found.reason)
