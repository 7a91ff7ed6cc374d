"""Detection (boxes and probability maps) and segmentation tallies with known answers."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from evaluator_graphs import split_boxes_model
from PIL import Image, ImageDraw

from optistudio.core.errors import DataMismatch, InvalidSpec
from optistudio.core.numerics.evaluators.base import Recognition, TaskScore, evaluators
from optistudio.core.numerics.evaluators.boxes import ApTally, iou_matrix, match
from optistudio.core.numerics.evaluators.components import label_components, label_runs
from optistudio.core.numerics.evaluators.detection_map import text_boxes
from optistudio.core.numerics.evaluators.recognize import model_facts, recognize_task


def judge(task: str, outputs: list[str], ref: dict, cand: dict, labels=None) -> TaskScore:
    recognition = Recognition(task=task, reason="test", outputs=outputs)
    tally = evaluators.get(task).create().tally(recognition, labels)
    tally.add(ref, cand, first_sample=0)
    return tally.score()


# boxes ---------------------------------------------------------------------------------------

BOXES = np.array([[0, 0, 10, 10], [20, 20, 40, 40], [50, 0, 60, 30]], dtype=np.float32)
SCORES = np.array([0.9, 0.8, 0.71], dtype=np.float32)
CLASSES = np.array([0, 1, 2])


def test_iou_and_greedy_matching() -> None:
    shifted = BOXES + np.array([1, 0, 1, 0], dtype=np.float32)

    overlap = iou_matrix(BOXES[:1], shifted[:1])

    assert overlap[0, 0] == pytest.approx(90 / 110)
    pairs = match(BOXES, shifted)
    assert pairs[0] == (1, 1)  # the highest IoU first
    assert sorted(pairs) == [(0, 0), (1, 1), (2, 2)]
    assert match(BOXES, shifted, CLASSES, CLASSES[::-1].copy()) == [(1, 1)]


def test_a_lost_box_costs_recall_and_is_named() -> None:
    ref = {"boxes": BOXES[None], "scores": SCORES[None], "labels": CLASSES[None]}
    cand = {name: array[:, :2] for name, array in ref.items()}  # the third box is lost

    score = judge("detection_boxes", ["boxes", "scores", "labels"], ref, cand)

    assert score.metrics["recall"] == pytest.approx(2 / 3)
    assert score.metrics["precision"] == 1.0
    assert score.metrics["f1"] == pytest.approx(0.8)
    assert score.worst[0].reference == "3 boxes; lost class 2 (0.71) at [50, 0, 60, 30]"
    assert score.worst[0].candidate == "2 boxes"


def test_boxes_below_the_score_threshold_do_not_count() -> None:
    low = SCORES.copy()
    low[2] = 0.1
    ref = {"boxes": BOXES, "scores": low}
    cand = {"boxes": BOXES[:2], "scores": low[:2]}  # unbatched [K, 4], no classes

    score = judge("detection_boxes", ["boxes", "scores"], ref, cand)

    assert score.metrics == {"f1": 1.0, "precision": 1.0, "recall": 1.0}


def test_rows_layout_and_an_added_box() -> None:
    rows = np.hstack([BOXES, SCORES[:, None], CLASSES[:, None]])[None]
    extra = np.vstack([rows[0], [[70, 70, 90, 90, 0.6, 0]]])[None]
    padded = np.vstack([rows[0], [[0, 0, 0, 0, 0.0, -1]]])[None]  # a padding row

    score = judge("detection_boxes", ["output0"], {"output0": padded}, {"output0": extra})

    assert score.metrics["precision"] == pytest.approx(3 / 4)
    assert score.metrics["recall"] == 1.0
    assert "added class 0 (0.60) at [70, 70, 90, 90]" in score.worst[0].candidate


def test_map50_against_labels_drops_when_a_class_is_missed() -> None:
    ref = {"boxes": BOXES[None], "scores": SCORES[None], "labels": CLASSES[None]}
    cand = {name: array[:, :2] for name, array in ref.items()}
    labels = [np.hstack([BOXES, CLASSES[:, None]]).astype(np.float64)]

    score = judge("detection_boxes", ["boxes", "scores", "labels"], ref, cand, labels)

    assert score.metrics["map50_reference"] == pytest.approx(1.0)
    assert score.metrics["map50_candidate"] == pytest.approx(2 / 3)
    assert score.metrics["map50_drop"] == pytest.approx(1 / 3)


def test_average_precision_of_a_ranked_list() -> None:
    """Three labelled boxes of one class; detections ranked hit, miss, hit: AP = 1/3 * 1 +
    1/3 * 2/3 (the third label never found)."""
    truth = np.array([[0, 0, 10, 10, 0], [20, 0, 30, 10, 0], [40, 0, 50, 10, 0]], np.float64)
    found = np.array([[0, 0, 10, 10], [100, 100, 110, 110], [20, 0, 30, 10]], np.float64)
    tally = ApTally()

    tally.add(found, np.array([0.9, 0.8, 0.7]), np.zeros(3), truth)

    assert tally.mean_ap() == pytest.approx(1 / 3 + 2 / 9)


def test_box_labels_are_read_from_json(tmp_path: Path) -> None:
    path = tmp_path / "boxes.json"
    path.write_text(json.dumps([[[0, 0, 10, 10, 1]], []]), encoding="utf-8")
    evaluator = evaluators.get("detection_boxes").create()

    labels = evaluator.read_labels(path, samples=2)

    assert [label.shape for label in labels] == [(1, 5), (0, 5)]
    with pytest.raises(DataMismatch, match="2 entries but the data has 3"):
        evaluator.read_labels(path, samples=3)


# probability maps ----------------------------------------------------------------------------


def page_map(regions: list[tuple[int, int, int, int]], size: int = 64) -> np.ndarray:
    """A map [1, 1, H, W]: 0.9 inside each (x1, y1, x2, y2) region, 0.05 elsewhere."""
    probability = np.full((size, size), 0.05, dtype=np.float32)
    for x1, y1, x2, y2 in regions:
        probability[y1:y2, x1:x2] = 0.9
    return probability[None, None]


def test_a_lost_text_region_costs_box_recall_and_map_iou() -> None:
    ref = page_map([(4, 4, 30, 12), (4, 30, 50, 40)])  # 208 and 460 pixels
    cand = page_map([(4, 30, 50, 40)])

    score = judge("detection_map", ["map"], {"map": ref}, {"map": cand})

    assert score.metrics["box_recall"] == pytest.approx(0.5)
    assert score.metrics["box_precision"] == 1.0
    assert score.metrics["box_f1"] == pytest.approx(2 / 3)
    assert score.metrics["map_iou"] == pytest.approx(460 / 668)
    assert score.worst[0].reference.startswith("2 text boxes")


def test_text_boxes_follow_ppocr_thresholds() -> None:
    probability = page_map([(4, 4, 30, 12), (40, 40, 42, 60)])[0, 0]  # the second 2 px wide
    probability[50:52, 4:20] = 0.4  # above 0.3 but a weak region: mean below 0.6

    mask, boxes = text_boxes(probability)

    assert boxes.tolist() == [[4, 4, 30, 12]]
    assert int(mask.sum()) == 26 * 8 + 2 * 20 + 2 * 16


def test_map_labels_give_each_models_box_f1(tmp_path: Path) -> None:
    ref = page_map([(4, 4, 30, 12), (4, 30, 50, 40)])
    cand = page_map([(4, 30, 50, 40)])
    path = tmp_path / "text.json"
    path.write_text(json.dumps([[[4, 4, 30, 12], [4, 30, 50, 40]]]), encoding="utf-8")
    labels = evaluators.get("detection_map").create().read_labels(path, samples=1)

    score = judge("detection_map", ["map"], {"map": ref}, {"map": cand}, labels)

    assert score.metrics["box_f1_reference"] == 1.0
    assert score.metrics["box_f1_candidate"] == pytest.approx(2 / 3)
    assert score.metrics["box_f1_drop"] == pytest.approx(1 / 3)


def test_the_union_find_labels_as_scipy_does() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        mask = rng.random((rng.integers(1, 25), rng.integers(1, 25))) > rng.random()
        labels, count = label_runs(mask)
        reference, reference_count = label_components(mask)
        assert count == reference_count
        assert np.array_equal(labels, reference)


def test_diagonal_pixels_are_one_component() -> None:
    mask = np.eye(5, dtype=bool) | np.eye(5, dtype=bool)[::-1]

    assert label_runs(mask)[1] == 1
    assert label_runs(np.array([[1, 0, 1]], dtype=bool))[1] == 2


RAPIDOCR = importlib.util.find_spec("rapidocr_onnxruntime")


@pytest.mark.skipif(RAPIDOCR is None, reason="rapidocr-onnxruntime not installed")
def test_the_real_ppocr_detector_map_is_read_as_text_boxes() -> None:
    """PP-OCRv4 det on a rendered page: its map holds text boxes; the page with one line
    blanked out loses boxes, and the evaluator says so."""
    assert RAPIDOCR is not None and RAPIDOCR.origin is not None
    session = ort.InferenceSession(
        str(Path(RAPIDOCR.origin).parent / "models" / "ch_PP-OCRv4_det_infer.onnx")
    )
    pages = [_page(["HELLO WORLD 123", "OPTIMIZE ME"]), _page(["HELLO WORLD 123", ""])]
    ref, cand = (session.run(None, {"x": page})[0] for page in pages)

    same = judge("detection_map", ["map"], {"map": ref}, {"map": ref.copy()})
    lost = judge("detection_map", ["map"], {"map": ref}, {"map": cand})

    assert same.metrics["box_f1"] == 1.0 and same.metrics["map_iou"] == 1.0
    assert lost.metrics["box_recall"] < 1.0
    assert lost.metrics["box_precision"] == pytest.approx(1.0)


def _page(lines: list[str]) -> np.ndarray:
    image = Image.new("RGB", (320, 160), "white")
    draw = ImageDraw.Draw(image)
    for row, line in enumerate(lines):
        draw.text((16, 24 + 56 * row), line, fill="black", font_size=28)
    pixels = (np.asarray(image, np.float32) / 255.0 - 0.5) / 0.5
    return pixels.transpose(2, 0, 1)[None].astype(np.float32)


# segmentation --------------------------------------------------------------------------------


def class_scores(class_map: np.ndarray, classes: int = 3) -> np.ndarray:
    """One-hot scores [1, K, H, W] whose argmax is `class_map`."""
    return np.eye(classes, dtype=np.float32)[class_map].transpose(2, 0, 1)[None]


def test_a_wrong_region_in_a_segmentation_map() -> None:
    ref_map = np.zeros((4, 4), dtype=np.int64)
    ref_map[:2, :2] = 1
    cand_map = ref_map.copy()
    cand_map[0, 0] = 2  # one pixel of class 1 painted as class 2

    score = judge(
        "segmentation", ["out"], {"out": class_scores(ref_map)}, {"out": class_scores(cand_map)}
    )

    assert score.metrics["miou"] == pytest.approx((1 + 0.75 + 0) / 3)
    assert score.metrics["pixel_agreement"] == pytest.approx(15 / 16)
    assert score.worst[0].sample == 0
    assert "1 pixels (6.2%) changed" in score.worst[0].candidate


def test_segmentation_against_label_maps_ignores_255(tmp_path: Path) -> None:
    ref_map = np.zeros((4, 4), dtype=np.int64)
    ref_map[:2, :2] = 1
    cand_map = np.zeros((4, 4), dtype=np.int64)
    labels = ref_map.copy()[None]
    labels[0, 3, 3] = 255
    np.save(tmp_path / "labels.npy", labels.astype(np.uint8))
    read = evaluators.get("segmentation").create().read_labels(tmp_path / "labels.npy", samples=1)

    score = judge(
        "segmentation",
        ["out"],
        {"out": class_scores(ref_map)},
        {"out": class_scores(cand_map)},
        read,
    )

    assert score.metrics["miou_reference"] == 1.0
    assert score.metrics["miou_candidate"] == pytest.approx((11 / 15 + 0) / 2)
    assert score.metrics["miou_drop"] == pytest.approx(1 - 11 / 30)


def test_scores_per_class_give_each_box_its_class() -> None:
    per_class = np.eye(3, dtype=np.float32)[CLASSES] * SCORES[:, None]  # [K, C]
    swapped = per_class[:, [1, 0, 2]]  # boxes 0 and 1 change class

    score = judge(
        "detection_boxes",
        ["boxes", "scores"],
        {"boxes": BOXES, "scores": per_class},
        {"boxes": BOXES, "scores": swapped},
    )

    assert score.metrics["recall"] == pytest.approx(1 / 3)
    assert "class 0 (0.90)" in score.worst[0].reference


def test_a_user_picks_the_box_outputs_in_order(tmp_path: Path) -> None:
    facts = model_facts(split_boxes_model(tmp_path / "m.onnx"))

    found = recognize_task(facts, task="detection_boxes", outputs=["boxes", "scores"])

    assert found is not None and found[1].outputs == ["boxes", "scores"]
    with pytest.raises(InvalidSpec, match="the outputs go boxes first"):
        recognize_task(facts, task="detection_boxes", outputs=["scores", "boxes"])
