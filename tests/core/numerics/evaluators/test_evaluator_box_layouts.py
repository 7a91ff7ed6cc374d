"""Detector layouts judged by the boxes they hold: the same three-box scene written as NMS rows
(6 and 7 columns), raw YOLOv5 and YOLOv8 predictions, decoded boxes with transposed scores per
class and PicoDet-style heads; a variant losing or shifting a box fails the budget."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from optistudio.core.errors import DataMismatch, OutputsDiffer
from optistudio.core.numerics.evaluators.base import Recognition, TaskScore, evaluators
from optistudio.core.numerics.evaluators.box_layouts import detect_layout
from optistudio.core.numerics.evaluators.detection_boxes import DETECTION_BOXES, image_detections

BOXES = np.array([[10, 10, 30, 40], [50, 20, 90, 60], [100, 100, 140, 130]], dtype=np.float64)
SCORES = np.array([0.9, 0.8, 0.7])
CLASSES = np.array([0, 1, 2])
ANCHORS = 63
Scene = tuple[np.ndarray, np.ndarray, np.ndarray]
Outputs = dict[str, np.ndarray]


def scene(kind: str) -> Scene:
    """The three boxes as the original finds them, or a variant's: box 0 lost or moved."""
    if kind == "missing":
        return BOXES[1:], SCORES[1:], CLASSES[1:]
    if kind == "shifted":
        moved = BOXES.copy()
        moved[0] += [60, 0, 60, 0]  # far off its place: IoU 0 with where it was
        return moved, SCORES, CLASSES
    return BOXES, SCORES, CLASSES


def rows6(found: Scene) -> Outputs:
    boxes, scores, classes = found
    rows = np.hstack([boxes, scores[:, None], classes[:, None]])
    padding = [[0, 0, 0, 0, 0, -1]] * (4 - len(rows))  # NMS pads to a fixed count
    return {"dets": np.vstack([rows, padding])[None].astype(np.float32)}


def rows7(found: Scene) -> Outputs:
    """Image 0 holds the boxes; image 1 of the batch has none (no rows name it)."""
    boxes, scores, classes = found
    rows = np.hstack([np.zeros((len(boxes), 1)), boxes, classes[:, None], scores[:, None]])
    return {"dets": rows.astype(np.float32)}


def anchor_rows(found: Scene, objectness: bool) -> np.ndarray:
    """[ANCHORS, 4 (+1) + 3]: each box, a weaker duplicate of it one pixel off (for NMS), and
    faint background anchors."""
    boxes, scores, classes = found
    rows = np.zeros((ANCHORS, 4 + int(objectness) + 3))
    rows[:, :4] = [5, 5, 4, 4]
    rows[:, 4:] = 0.01
    for at, (box, score, cls) in enumerate(zip(boxes, scores, classes, strict=True)):
        for slot, (shift, weight) in enumerate(((0, 1.0), (1, 0.9))):
            row = rows[2 * at + slot]
            row[:4] = [(box[0] + box[2]) / 2 + shift, (box[1] + box[3]) / 2, *(box[2:] - box[:2])]
            row[4:] = 0.0
            if objectness:
                row[4] = 0.95
            row[4 + int(objectness) + cls] = score * weight / (0.95 if objectness else 1)
    return rows


def yolov5(found: Scene) -> Outputs:
    return {"output0": anchor_rows(found, True)[None].astype(np.float32)}


def yolov8(found: Scene) -> Outputs:
    return {"output0": anchor_rows(found, False).T[None].astype(np.float32)}


def decoded_per_class(found: Scene) -> Outputs:
    """PicoDet exported with its decoding: boxes [1, A, 4] and scores [1, C, A]."""
    rows = anchor_rows(found, False)
    centre, extent = rows[:, :2], rows[:, 2:4]
    boxes = np.hstack([centre - extent / 2, centre + extent / 2])
    return {"boxes": boxes[None].astype(np.float32), "scores": rows[:, 4:].T[None]}


LAYOUTS: dict[str, tuple[Callable[[Scene], Outputs], list[str], str]] = {
    "rows-6": (rows6, ["dets"], "NMS rows x1, y1, x2, y2, score(, class)"),
    "rows-7": (rows7, ["dets"], "NMS rows batch index"),
    "yolov5": (yolov5, ["output0"], "YOLOv5 / YOLOX"),
    "yolov8": (yolov8, ["output0"], "YOLOv8 / v11"),
    "picodet-decoded": (decoded_per_class, ["boxes", "scores"], "a score per class"),
}


def judged(layout: str, variant: str, samples: int | None = None) -> TaskScore:
    encode, outputs, _ = LAYOUTS[layout]
    tally = DETECTION_BOXES.create().tally(Recognition(task="d", reason="t", outputs=outputs))
    if samples is None:
        tally.add(encode(scene("same")), encode(scene(variant)), first_sample=0)
    else:
        tally.add_run(
            encode(scene("same")), encode(scene(variant)), first_sample=0, samples=samples
        )
    return tally.score()


def within(score: TaskScore) -> bool:
    limit = DETECTION_BOXES.default_budget["f1"]
    return DETECTION_BOXES.metric("f1").passes(score.metrics["f1"], limit)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_an_identical_variant_passes_and_the_note_names_the_layout(layout: str) -> None:
    score = judged(layout, "same")

    assert score.metrics["f1"] == 1.0 and within(score)
    assert LAYOUTS[layout][2] in score.note
    assert "3 original and 3 variant boxes, 3 matched" in score.note


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_lost_box_fails_the_budget(layout: str) -> None:
    score = judged(layout, "missing")

    assert score.metrics["recall"] == pytest.approx(2 / 3)
    assert score.metrics["precision"] == 1.0
    assert not within(score)
    assert "lost class 0 (0.90) at [10, 10, 30, 40]" in score.worst[0].reference


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_shifted_box_fails_the_budget(layout: str) -> None:
    score = judged(layout, "shifted")

    assert score.metrics["f1"] == pytest.approx(2 / 3)
    assert not within(score)


def test_nms_rows_with_a_batch_index_count_the_images_fed() -> None:
    score = judged("rows-7", "same", samples=2)

    assert score.samples == 2 and score.metrics["f1"] == 1.0


def test_raw_predictions_are_suppressed_as_a_deployment_would() -> None:
    (found,) = image_detections(["output0"], yolov8(scene("same")))

    assert sorted(found.classes.tolist()) == [0, 1, 2]  # the one-pixel duplicates are gone
    assert np.allclose(found.boxes[np.argsort(found.classes)], BOXES)


@pytest.mark.parametrize(
    ("shape", "layout"),
    [
        ((1, 84, 2100), "channels"),
        ((1, 25200, 85), "anchors"),
        ((2, 300, 6), "rows"),
        ((300, 5), "rows"),
        ((12, 7), "indexed_rows"),
        ((1, 2100, 6), "anchors"),
    ],
    ids=["yolov8-2100", "yolov5", "nms-6", "nms-5", "nms-7", "yolov5-one-class"],
)
def test_the_layout_is_read_from_the_real_shape(shape: tuple[int, ...], layout: str) -> None:
    values = np.random.default_rng(0).uniform(0, 1, shape).astype(np.float32)
    if layout == "rows" and shape[-1] == 6:  # NMS rows: a class column of whole numbers
        values[..., 5] = 1
    if layout == "indexed_rows":  # and a batch index
        values[:, 0], values[:, 5] = 0, 3

    assert detect_layout([values], ["out"]) == layout


def test_a_shape_no_layout_reads_is_refused_naming_the_layouts() -> None:
    with pytest.raises(DataMismatch, match=r"\[1, 6, 6\]; detection outputs read here"):
        detect_layout([np.full((1, 6, 6), 0.5)], ["out"])


def test_a_raw_variant_of_another_shape_is_the_variants_fault() -> None:
    tally = DETECTION_BOXES.create().tally(Recognition(task="d", reason="t", outputs=["output0"]))
    reference = yolov8(scene("same"))

    with pytest.raises(OutputsDiffer, match="cannot be compared"):
        tally.add(reference, {"output0": reference["output0"][:, :, :40]}, first_sample=0)


# PicoDet-style heads -------------------------------------------------------------------------

BINS = 8


def heads(
    found: list[tuple[int, int, tuple[int, int, int, int], int, float]],
    cells_per_head: tuple[int, ...] = (16, 4),
) -> Outputs:
    """Two heads (by default 4 x 4 cells at stride 8, 2 x 2 at stride 16), 3 classes; `found`
    lists (head, cell, bins of left/top/right/bottom, class, score). Other cells: faint scores
    and flat distributions."""
    arrays: Outputs = {}
    for head, cells in enumerate(cells_per_head):
        scores = np.full((1, cells, 3), 0.01, np.float32)
        dist = np.zeros((1, cells, 4 * BINS), np.float32)
        for where, cell, sides, cls, score in found:
            if where == head:
                scores[0, cell, cls] = score
                for side, bin_ in enumerate(sides):
                    dist[0, cell, side * BINS + bin_] = 30.0  # softmax ~ one-hot
        arrays |= {f"cls{head}": scores, f"reg{head}": dist}
    return arrays


HEAD_BOXES = [(0, 5, (1, 1, 2, 2), 0, 0.9), (1, 1, (1, 0, 1, 2), 2, 0.8)]
HEAD_OUTPUTS = ["cls0", "reg0", "cls1", "reg1"]


def test_heads_are_decoded_on_square_grids_at_doubling_strides() -> None:
    (found,) = image_detections(HEAD_OUTPUTS, heads(HEAD_BOXES))

    order = np.argsort(found.classes)
    # head 0, cell 5 = row 1, col 1: centre (12, 12); sides 1, 1, 2, 2 bins of 8 pixels.
    # head 1, cell 1 = row 0, col 1 at stride 16: centre (24, 8); sides 1, 0, 1, 2 bins.
    assert np.allclose(found.boxes[order], [[4, 4, 28, 28], [8, 8, 40, 40]], atol=1e-6)
    assert found.classes[order].tolist() == [0, 2]


@pytest.mark.parametrize(
    ("variant", "passes"),
    [
        (HEAD_BOXES, True),
        (HEAD_BOXES[:1], False),
        ([HEAD_BOXES[0], (1, 1, (1, 0, 1, 7), 2, 0.8)], False),  # the box grows 5 bins down
    ],
    ids=["identical", "lost-box", "shifted-side"],
)
def test_heads_are_judged_by_their_decoded_boxes(variant: list, passes: bool) -> None:
    tally = (
        evaluators.get("detection_boxes")
        .create()
        .tally(Recognition(task="d", reason="t", outputs=HEAD_OUTPUTS))
    )

    tally.add(heads(HEAD_BOXES), heads(variant), first_sample=0)
    score = tally.score()

    assert within(score) is passes
    assert "PicoDet-style" in score.note


def test_heads_that_are_no_square_grid_are_refused_with_a_way_out() -> None:
    arrays = {"s": np.zeros((1, 12, 3)), "b": np.zeros((1, 12, 32)), **heads(HEAD_BOXES)}

    with pytest.raises(DataMismatch, match="12 cells is no square grid"):
        image_detections(["s", "b", "cls1", "reg1"], arrays)


# a 48 x 32 input: heads of 6 x 4 cells at stride 8 and 3 x 2 at stride 16
TALL_CELLS = (24, 6)
TALL_BOXES = [(0, 9, (1, 1, 2, 2), 0, 0.9), (1, 3, (1, 0, 1, 2), 2, 0.8)]


def test_heads_of_a_non_square_input_are_placed_on_its_grid() -> None:
    arrays = heads(TALL_BOXES, TALL_CELLS)

    (found,) = image_detections(HEAD_OUTPUTS, arrays, image_size=(48, 32))

    order = np.argsort(found.classes)
    # head 0, cell 9 = row 2, col 1 of 4 columns: centre (12, 20); sides 1, 1, 2, 2 x 8 px.
    # head 1, cell 3 = row 1, col 1 of 2 columns at stride 16: centre (24, 24).
    assert np.allclose(found.boxes[order], [[4, 12, 28, 36], [8, 24, 40, 56]], atol=1e-6)
    assert found.classes[order].tolist() == [0, 2]


def test_heads_of_a_non_square_grid_without_the_image_size_are_refused() -> None:
    with pytest.raises(DataMismatch, match=r"24 cells is no square grid \(6 x 4 or 4 x 6"):
        image_detections(HEAD_OUTPUTS, heads(TALL_BOXES, TALL_CELLS))


def test_heads_that_do_not_fit_the_image_size_are_refused() -> None:
    with pytest.raises(DataMismatch, match="24 cells is no grid of a 40 x 40 image"):
        image_detections(HEAD_OUTPUTS, heads(TALL_BOXES, TALL_CELLS), image_size=(40, 40))
