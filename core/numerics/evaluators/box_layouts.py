"""A detector's outputs read as each image's boxes, in the layout the arrays of a run have.

Boxes come out as corners x1, y1, x2, y2 with a score and a class (`Detections`). The layout is
read from the arrays themselves (`detect_layout`, on the original's first batch; both models are
then read alike), never from the declared shapes:

- rows, after the model's own NMS: [N, K, 5] / [K, 5] of x1, y1, x2, y2, score; [N, K, 6] /
  [K, 6] of the same and a class; [K, 7] of batch index, x1, y1, x2, y2, class, score (YOLOv7's
  end-to-end export: the images are split by the index). A sixth or seventh column is read so
  only when the class (and index) columns hold whole numbers; else the array is raw predictions;
- raw predictions, one per anchor, before NMS: [N, A, 5 + C] of cx, cy, w, h, objectness and C
  class scores (YOLOv5; YOLOX exported with its decoding), score = objectness x the best class
  score; [N, 4 + C, A] of cx, cy, w, h and C class scores, no objectness (YOLOv8 / v11). The
  smaller of the two non-batch axes holds the values of an anchor: [N, 84, 8400] is 80 classes
  on 8400 anchors. Assumed: anchors last means no objectness, anchors first means objectness
  (an untransposed YOLOv8 [N, 8400, 84] would read class 0 as objectness);
- split: boxes [N, K, 4] / [K, 4] (corners) with scores [N, K] / [K] and maybe classes, after
  NMS; or scores per class [N, K, C] / [K, C], also transposed [N, C, K] (decoded boxes before
  NMS: PicoDet exported with its decoding, SSD). When C equals K, [N, K, C] is assumed;
- heads: per-head class scores [N, A_i, C] and box distributions [N, A_i, 4 (R + 1)], listed
  as pairs, scores first (PicoDet / GFL exported without post-processing; either may have its
  anchors last). Each head is a grid of ceil(H / s) x ceil(W / s) cells at stride s, H x W the
  image's height and width when known, else the squarest grid the cell counts fit with the
  finest head at stride 8 (`head_grids`); a side's distance is the expectation of the softmax
  over its R + 1 bins, in strides, from the cell's centre ((col + 0.5) x stride,
  (row + 0.5) x stride).

Raw predictions and scores per class are suppressed as a deployment would: boxes scoring below
`min_score` dropped, the best `MAX_CANDIDATES` kept, then non-maximum suppression per class
(`boxes.nms`: IoU > 0.45 suppressed, at most 300 boxes).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from optistudio.core.errors import DataMismatch, OutputsDiffer
from optistudio.core.numerics.evaluators.boxes import nms
from optistudio.core.numerics.evaluators.head_grids import Grid, head_grids

Layout = Literal["rows", "indexed_rows", "anchors", "channels", "split", "per_class", "heads"]
MAX_CANDIDATES = 1000
"""Boxes NMS looks at per image, the best first (its memory grows with the square)."""
LAYOUTS: dict[Layout, str] = {
    "rows": "NMS rows x1, y1, x2, y2, score(, class)",
    "indexed_rows": "NMS rows batch index, x1, y1, x2, y2, class, score",
    "anchors": "raw predictions [N, anchors, 5 + classes] (cx, cy, w, h, objectness, class "
    "scores: YOLOv5 / YOLOX), decoded and suppressed by NMS",
    "channels": "raw predictions [N, 4 + classes, anchors] (cx, cy, w, h, class scores, no "
    "objectness: YOLOv8 / v11), decoded and suppressed by NMS",
    "split": "boxes with a score (and class) each, after NMS",
    "per_class": "boxes with a score per class, suppressed by NMS",
    "heads": "per-head class scores and box distributions (PicoDet-style), decoded on grids of "
    "the image's height and width / stride (square ones at strides 8, 16, 32, ... when the size "
    "is not known) and suppressed by NMS",
}


class Detections:
    """One image's boxes [K, 4] (corners), scores [K] and classes [K] (0 when none given)."""

    def __init__(self, boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray) -> None:
        self.boxes = boxes.astype(np.float64).reshape(-1, 4)
        self.scores = np.nan_to_num(scores.astype(np.float64).reshape(-1), nan=0.0)
        self.classes = np.nan_to_num(classes.reshape(-1).astype(np.float64), nan=-1).astype(
            np.int64
        )

    def take(self, keep: np.ndarray) -> Detections:
        return Detections(self.boxes[keep], self.scores[keep], self.classes[keep])

    def above(self, threshold: float) -> Detections:
        return self.take((self.scores >= threshold) & (self.classes >= 0))

    def suppressed(self, min_score: float) -> Detections:
        """The boxes a deployment keeps: above `min_score`, the best MAX_CANDIDATES, NMS."""
        found = self.above(min_score)
        best = np.argsort(-found.scores, kind="stable")[:MAX_CANDIDATES]
        found = found.take(best)
        return found.take(nms(found.boxes, found.scores, found.classes))

    def describe(self, index: int) -> str:
        x1, y1, x2, y2 = (f"{value:.4g}" for value in self.boxes[index])
        return f"class {self.classes[index]} ({self.scores[index]:.2f}) at [{x1}, {y1}, {x2}, {y2}]"


def detect_layout(arrays: list[np.ndarray], names: list[str]) -> Layout:
    """Which layout the arrays (in the recognition's order) are in; DataMismatch naming the
    layouts read when they are in none."""
    if len(arrays) == 1:
        return _single_layout(arrays[0], names[0])
    first = arrays[0]
    if len(arrays) <= 3 and first.ndim in (2, 3) and first.shape[-1] == 4:
        return "per_class" if arrays[1].ndim == first.ndim else "split"
    if len(arrays) % 2 == 0 and all(array.ndim in (2, 3) for array in arrays):
        return "heads"
    shapes = ", ".join(f"{name} {list(a.shape)}" for name, a in zip(names, arrays, strict=True))
    raise DataMismatch(
        f"The outputs {shapes} are in no detection layout read here: boxes [N, K, 4] first "
        "with scores (and classes), or pairs of per-head class scores and box distributions.",
        hint="Set the judged outputs by hand in that order, or pick another task.",
    )


def _single_layout(array: np.ndarray, name: str) -> Layout:
    if array.ndim not in (2, 3):
        raise _unread(name, array)
    rows = array if array.ndim == 3 else array[None]
    columns = rows.shape[-1]
    if columns == 5 or (columns == 6 and _whole(rows[..., 5])):
        return "rows"
    if columns == 7 and _whole(rows[..., 0]) and _whole(rows[..., 5]):
        return "indexed_rows"
    if rows.shape[2] > rows.shape[1] >= 5:
        return "channels"
    if rows.shape[1] > rows.shape[2] >= 6:
        return "anchors"
    raise _unread(name, array)


def _unread(name: str, array: np.ndarray) -> DataMismatch:
    return DataMismatch(
        f"Output {name!r} has shape {list(array.shape)}; detection outputs read here are NMS "
        "rows of 5, 6 or 7 values ([N, K, 6]: x1, y1, x2, y2, score, class; [K, 7]: batch "
        "index, x1, y1, x2, y2, class, score) or raw predictions [N, anchors, 5 + classes] / "
        "[N, 4 + classes, anchors].",
        hint="Set the task or the judged outputs by hand if recognition picked wrongly.",
    )


def _whole(values: np.ndarray) -> bool:
    """Whether every value is a whole number (class ids, batch indices; -1 pads)."""
    return bool(np.all(np.isfinite(values) & (values == np.round(values))))


def has_classes(layout: Layout, arrays: list[np.ndarray]) -> bool:
    """Whether the layout gives each box a class (else every box is class 0)."""
    if layout == "rows":
        return arrays[0].shape[-1] == 6
    if layout == "split":
        return len(arrays) > 2
    return True


def check_alike(layout: Layout, reference: list[np.ndarray], candidate: list[np.ndarray]) -> None:
    """OutputsDiffer unless the variant's arrays are in the original's layout: the same ranks,
    and the same shapes where no NMS ran (after NMS the box counts may differ, not the values
    of a row or box)."""
    after_nms = layout in ("rows", "indexed_rows", "split")
    for at, (ref, cand) in enumerate(zip(reference, candidate, strict=True)):
        if after_nms:
            same = ref.ndim == cand.ndim and (at > 0 or ref.shape[-1:] == cand.shape[-1:])
        else:
            same = ref.shape == cand.shape
        if not same:
            raise OutputsDiffer(
                f"The variant's detections have shape {list(cand.shape)} where the original's "
                f"have {list(ref.shape)} ({LAYOUTS[layout]}); they cannot be compared.",
                hint="The variant, not your model or data, is at fault: use another variant.",
            )


def read_images(
    layout: Layout,
    arrays: list[np.ndarray],
    *,
    samples: int | None,
    min_score: float,
    image_size: tuple[int, int] | None = None,
) -> list[Detections]:
    """Each image's detections in `arrays` (the recognition's order); `samples` (the images
    fed, when known) splits NMS rows that carry a batch index, images without rows included;
    `image_size` (height, width, when known) places PicoDet-style heads' cells."""
    if layout == "rows":
        return _rows(arrays[0])
    if layout == "indexed_rows":
        return _indexed_rows(arrays[0], samples)
    if layout in ("anchors", "channels"):
        return _raw(arrays[0], layout == "anchors", min_score)
    if layout == "heads":
        return _heads(arrays, min_score, image_size)
    return _split(arrays, per_class=layout == "per_class", min_score=min_score)


def _rows(rows: np.ndarray) -> list[Detections]:
    images = rows if rows.ndim == 3 else rows[None]
    classed = images.shape[-1] == 6
    return [
        Detections(
            image[:, :4], image[:, 4], image[:, 5] if classed else np.zeros(len(image), np.int64)
        )
        for image in images
    ]


def _indexed_rows(rows: np.ndarray, samples: int | None) -> list[Detections]:
    flat = rows.reshape(-1, 7).astype(np.float64)
    index = flat[:, 0].astype(np.int64)
    count = samples if samples is not None else int(index.max(initial=0)) + 1
    if index.size and index.max() >= count:
        raise DataMismatch(
            f"NMS rows name image {int(index.max())} of a batch of {count} images.",
            hint="Column 0 of [K, 7] detections must be the batch index.",
        )
    return [
        Detections(flat[index == i, 1:5], flat[index == i, 6], flat[index == i, 5])
        for i in range(count)
    ]


def _raw(predictions: np.ndarray, objectness: bool, min_score: float) -> list[Detections]:
    images = predictions if predictions.ndim == 3 else predictions[None]
    if not objectness:
        images = images.transpose(0, 2, 1)
    return [_decoded(image, objectness).suppressed(min_score) for image in images]


def _decoded(image: np.ndarray, objectness: bool) -> Detections:
    """One image's anchors [A, 4 (+1) + C] as corner boxes with the best class."""
    values = image.astype(np.float64)
    centre, extent = values[:, :2], values[:, 2:4]
    boxes = np.hstack([centre - extent / 2, centre + extent / 2])
    scores = values[:, 5:] if objectness else values[:, 4:]
    best = scores.max(axis=1) * (values[:, 4] if objectness else 1.0)
    return Detections(boxes, best, scores.argmax(axis=1))


def _split(arrays: list[np.ndarray], *, per_class: bool, min_score: float) -> list[Detections]:
    boxes, scores = arrays[0], arrays[1]
    batched = boxes.ndim == 3
    if not batched:
        boxes, scores = boxes[None], scores[None]
    if per_class:
        scores = _anchors_first(scores, boxes.shape[1], "scores")
        return [
            Detections(image, found.max(axis=1), found.argmax(axis=1)).suppressed(min_score)
            for image, found in zip(boxes, scores, strict=True)
        ]
    classes = arrays[2] if len(arrays) > 2 else np.zeros(scores.shape, np.int64)
    classes = classes if batched else classes[None]
    return [Detections(*parts) for parts in zip(boxes, scores, classes, strict=True)]


def _anchors_first(array: np.ndarray, anchors: int, what: str) -> np.ndarray:
    """[N, anchors, X] from [N, anchors, X] or [N, X, anchors] ([N, anchors, X] when both)."""
    if array.shape[1] == anchors:
        return array
    if array.shape[2] == anchors:
        return array.transpose(0, 2, 1)
    raise DataMismatch(
        f"The {what} {list(array.shape)} have no axis of the {anchors} boxes or cells they "
        "should score.",
        hint="List the outputs boxes first, then scores; or per head, scores then boxes.",
    )


def _heads(
    arrays: list[np.ndarray], min_score: float, image_size: tuple[int, int] | None
) -> list[Detections]:
    pairs = [_head(arrays[at], arrays[at + 1]) for at in range(0, len(arrays), 2)]
    grids = head_grids([scores.shape[1] for scores, _ in pairs], image_size)
    images: list[Detections] = []
    for image in range(pairs[0][0].shape[0]):
        parts = [
            (_head_boxes(dist[image], grid), scores[image])
            for (scores, dist), grid in zip(pairs, grids, strict=True)
        ]
        boxes = np.vstack([part[0] for part in parts])
        found = np.vstack([part[1] for part in parts]).astype(np.float64)
        images.append(
            Detections(boxes, found.max(axis=1), found.argmax(axis=1)).suppressed(min_score)
        )
    return images


def _head(scores: np.ndarray, distributions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A head's scores [N, A, C] and box distributions [N, A, 4 (R + 1)], anchors found as
    the axis the two share."""
    scores = scores if scores.ndim == 3 else scores[None]
    distributions = distributions if distributions.ndim == 3 else distributions[None]
    shared = set(scores.shape[1:]) & set(distributions.shape[1:])
    if not shared:
        raise DataMismatch(
            f"Head scores {list(scores.shape)} and box distributions "
            f"{list(distributions.shape)} share no axis of cells.",
            hint="List each head's class scores, then its box distributions.",
        )
    anchors = scores.shape[1] if scores.shape[1] in shared else max(shared)
    scores = _anchors_first(scores, anchors, "head scores")
    distributions = _anchors_first(distributions, anchors, "box distributions")
    if distributions.shape[2] % 4 or distributions.shape[2] < 8:
        raise DataMismatch(
            f"A head's box distributions hold {distributions.shape[2]} values per cell; "
            "they should be 4 sides x (R + 1) bins.",
            hint="List each head's class scores first, then its box distributions.",
        )
    return scores, distributions


def _head_boxes(distributions: np.ndarray, grid: Grid) -> np.ndarray:
    """Corner boxes [A, 4] of one head's cells from their side distributions [A, 4 (R + 1)]."""
    cells = len(distributions)
    logits = distributions.astype(np.float64).reshape(cells, 4, -1)
    logits -= logits.max(axis=2, keepdims=True)
    weights = np.exp(logits)
    weights /= weights.sum(axis=2, keepdims=True)
    distances = (weights * np.arange(logits.shape[2])).sum(axis=2) * grid.stride
    index = np.arange(cells)
    cx = (index % grid.cols + 0.5) * grid.stride
    cy = (index // grid.cols + 0.5) * grid.stride
    left, top, right, bottom = distances.T
    return np.stack([cx - left, cy - top, cx + right, cy + bottom], axis=1)
