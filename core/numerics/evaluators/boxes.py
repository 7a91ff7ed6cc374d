"""Boxes matched by overlap: IoU, greedy one-to-one matching, and AP@0.5 from binned scores.

Boxes are rows [x1, y1, x2, y2] (corners, any unit, the same for both sides). For boxes a, b

    IoU(a, b) = area(a ∩ b) / area(a ∪ b)            (0 when the union is empty)

`match` pairs boxes one to one, greedily: of all pairs with IoU >= 0.5 (and the same class when
classes are given), the highest-IoU pair first, then the next among the boxes still free. With
the original's boxes as truth, the matched count m over n_ref and n_cand boxes gives

    precision = m / n_cand,   recall = m / n_ref,   f1 = 2 m / (n_ref + n_cand)

(each 1 when both sides are empty). `ApTally` measures AP@0.5 of one model against labelled
boxes: per image and class, detections sorted by score match the highest-IoU free label box
(a true positive) or none (a false positive); their scores are binned in 1/1000 steps, so the
memory is one histogram per class, and AP is the area under the interpolated precision-recall
curve (every-point interpolation, as VOC 2010+ and COCO's per-threshold AP), mAP the mean
over classes that have labels.

`nms` is the non-maximum suppression a deployment runs on raw predictions: per class, in
descending score order, a box is kept unless it overlaps an already kept box of its class by
IoU > 0.45; at most 300 are kept.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from optistudio.core.errors import DataMismatch

MATCH_IOU = 0.5
SCORE_BINS = 1000
BLOCK_ROWS = 256
NMS_IOU = 0.45
MAX_BOXES = 300


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of `a` [n, 4] with every box of `b` [m, 4]: [n, m]."""
    a, b = a.astype(np.float64).reshape(-1, 4), b.astype(np.float64).reshape(-1, 4)
    width = np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0])
    height = np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1])
    inter = np.clip(width, 0, None) * np.clip(height, 0, None)
    union = _area(a)[:, None] + _area(b)[None, :] - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > 0, inter / union, 0.0)


def _area(boxes: np.ndarray) -> np.ndarray:
    return np.clip(boxes[:, 2] - boxes[:, 0], 0, None) * np.clip(boxes[:, 3] - boxes[:, 1], 0, None)


def match(
    ref: np.ndarray,
    cand: np.ndarray,
    ref_classes: np.ndarray | None = None,
    cand_classes: np.ndarray | None = None,
    threshold: float = MATCH_IOU,
) -> list[tuple[int, int]]:
    """Pairs (ref index, cand index), one to one, greedily by IoU >= `threshold`."""
    rows, cols, overlap = overlapping_pairs(ref, cand, ref_classes, cand_classes, threshold)
    pairs: list[tuple[int, int]] = []
    used_ref: set[int] = set()
    used_cand: set[int] = set()
    for index in np.argsort(-overlap, kind="stable"):
        row, col = int(rows[index]), int(cols[index])
        if row not in used_ref and col not in used_cand:
            pairs.append((row, col))
            used_ref.add(row)
            used_cand.add(col)
    return pairs


def overlapping_pairs(
    ref: np.ndarray,
    cand: np.ndarray,
    ref_classes: np.ndarray | None = None,
    cand_classes: np.ndarray | None = None,
    threshold: float = MATCH_IOU,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows, columns and IoUs of the pairs with IoU >= `threshold` (and the same class when
    classes are given), taken BLOCK_ROWS reference boxes at a time so that thousands of boxes
    on each side need memory for a block, not for every pair."""
    found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for start in range(0, len(ref), BLOCK_ROWS):
        overlap = iou_matrix(ref[start : start + BLOCK_ROWS], cand)
        if ref_classes is not None and cand_classes is not None:
            same = ref_classes[start : start + BLOCK_ROWS, None] == cand_classes[None, :]
            overlap = np.where(same, overlap, 0.0)
        rows, cols = np.nonzero(overlap >= threshold)
        found.append((rows + start, cols, overlap[rows, cols]))
    if not found:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    return tuple(np.concatenate(parts) for parts in zip(*found, strict=True))  # type: ignore[return-value]


def nms(
    boxes: np.ndarray,
    scores: np.ndarray,
    classes: np.ndarray,
    *,
    iou: float = NMS_IOU,
    max_boxes: int = MAX_BOXES,
) -> np.ndarray:
    """Indices of the boxes non-maximum suppression keeps (module docstring), best first.
    Memory is len(boxes)² IoUs: callers keep the best few thousand first."""
    order = np.argsort(-scores, kind="stable")
    overlap = iou_matrix(boxes[order], boxes[order])
    same = classes[order][:, None] == classes[order][None, :]
    suppressed = np.zeros(len(order), dtype=bool)
    kept: list[int] = []
    for rank in range(len(order)):
        if suppressed[rank]:
            continue
        kept.append(int(order[rank]))
        if len(kept) == max_boxes:
            break
        suppressed |= same[rank] & (overlap[rank] > iou)
    return np.asarray(kept, dtype=np.int64)


class MatchCounts:
    """Running matched / original / variant box counts: precision, recall, f1."""

    def __init__(self) -> None:
        self.matched = 0
        self.ref = 0
        self.cand = 0

    def add(self, matched: int, ref: int, cand: int) -> None:
        self.matched += matched
        self.ref += ref
        self.cand += cand

    def precision(self) -> float:
        return self.matched / self.cand if self.cand else 1.0 if self.ref == 0 else 0.0

    def recall(self) -> float:
        return self.matched / self.ref if self.ref else 1.0 if self.cand == 0 else 0.0

    def f1(self) -> float:
        total = self.ref + self.cand
        return 2 * self.matched / total if total else 1.0


class ApTally:
    """AP@0.5 of one model's detections against labelled boxes, over every image added."""

    def __init__(self) -> None:
        self.true = np.zeros((0, SCORE_BINS + 1), dtype=np.int64)
        self.false = np.zeros((0, SCORE_BINS + 1), dtype=np.int64)
        self.positives = np.zeros(0, dtype=np.int64)

    def add(
        self, boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, labels: np.ndarray
    ) -> None:
        """One image: detections (boxes, scores, classes) and its label rows [x1,y1,x2,y2,c]."""
        label_classes = labels[:, 4].astype(np.int64)
        self._grow(int(max(classes.max(initial=-1), label_classes.max(initial=-1))) + 1)
        np.add.at(self.positives, label_classes, 1)
        for cls in np.union1d(classes.astype(np.int64), label_classes):
            mine = np.flatnonzero(classes == cls)
            mine = mine[np.argsort(-scores[mine], kind="stable")]
            hits = _greedy_by_score(boxes[mine], labels[label_classes == cls, :4])
            bins = np.clip((scores[mine] * SCORE_BINS).astype(np.int64), 0, SCORE_BINS)
            np.add.at(self.true[cls], bins[hits], 1)
            np.add.at(self.false[cls], bins[~hits], 1)

    def _grow(self, classes: int) -> None:
        extra = classes - len(self.positives)
        if extra > 0:
            self.true = np.vstack([self.true, np.zeros((extra, SCORE_BINS + 1), np.int64)])
            self.false = np.vstack([self.false, np.zeros((extra, SCORE_BINS + 1), np.int64)])
            self.positives = np.concatenate([self.positives, np.zeros(extra, np.int64)])

    def mean_ap(self) -> float:
        """mAP@0.5 over the classes that have label boxes (0 when none has)."""
        labelled = np.flatnonzero(self.positives > 0)
        if labelled.size == 0:
            return 0.0
        return float(np.mean([self._ap(int(cls)) for cls in labelled]))

    def _ap(self, cls: int) -> float:
        true = np.cumsum(self.true[cls][::-1])
        false = np.cumsum(self.false[cls][::-1])
        recall = true / self.positives[cls]
        with np.errstate(divide="ignore", invalid="ignore"):
            precision = np.where(true + false > 0, true / (true + false), 0.0)
        envelope = np.maximum.accumulate(precision[::-1])[::-1]
        steps = np.diff(np.concatenate([[0.0], recall]))
        return float(np.sum(steps * envelope))


def _greedy_by_score(detections: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """For detections in score order: whether each takes a free truth box at IoU >= 0.5."""
    hits = np.zeros(len(detections), dtype=bool)
    if len(detections) == 0 or len(truth) == 0:
        return hits
    overlap = iou_matrix(detections, truth)
    free = np.ones(len(truth), dtype=bool)
    for row in range(len(detections)):
        candidates = np.where(free, overlap[row], -1.0)
        best = int(candidates.argmax())
        if candidates[best] >= MATCH_IOU:
            hits[row], free[best] = True, False
    return hits


def read_box_labels(path: Path, *, samples: int, classes: bool = True) -> list[np.ndarray]:
    """Label boxes from a .json list with one entry per sample, each a list of
    [x1, y1, x2, y2, class] rows (or [x1, y1, x2, y2] with `classes` off: class 0), in the
    coordinates the model's boxes use. Returns one [M, 5] float array per sample."""
    path = Path(path)
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        value = None
    if not isinstance(value, list):
        raise DataMismatch(
            f"The labels file {path.name} is not a JSON list with one list of boxes per sample.",
            hint="Write [[[x1, y1, x2, y2, class], ...], ...]: one list of boxes per sample.",
        )
    if len(value) != samples:
        raise DataMismatch(
            f"labels have {len(value)} entries but the data has {samples} samples.",
            hint="Give one list of boxes per sample (an empty list for none), in order.",
        )
    return [_box_rows(entry, index, path.name, classes) for index, entry in enumerate(value)]


def _box_rows(entry: object, index: int, name: str, classes: bool) -> np.ndarray:
    width = 5 if classes else 4
    try:
        rows = np.asarray(entry, dtype=np.float64).reshape(-1, width)
    except (TypeError, ValueError):
        rows = None
    if rows is None or not np.isfinite(rows).all():
        what = "[x1, y1, x2, y2, class]" if classes else "[x1, y1, x2, y2]"
        raise DataMismatch(
            f"Sample {index} of {name} is not a list of {what} rows.",
            hint="Each sample's entry is a list of boxes, each a list of numbers.",
        )
    if classes:
        return rows
    return np.hstack([rows, np.zeros((len(rows), 1))])
