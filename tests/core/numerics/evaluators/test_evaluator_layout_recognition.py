"""Recognizing detector and recognizer layouts from tiny graphs: raw YOLOv8 / YOLOv5
predictions, NMS rows with a batch index, PicoDet heads, a recognizer's ArgMax ids; and a YOLOv8-
style model judged end to end on ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from evaluator_graphs import (
    argmax_ids_model,
    ctc_logits_model,
    indexed_rows_model,
    picodet_heads_model,
    picodet_image_model,
    save,
    tensor,
    yolo_model,
)
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.data.datasets import SyntheticDataset
from optistudio.core.model.intake import inspect_model
from optistudio.core.numerics.accuracy import (
    AccuracyBudget,
    TaskBudget,
    TaskJudge,
    accuracy_report,
    within_budget,
)
from optistudio.core.numerics.evaluators.detection_boxes import DETECTION_BOXES
from optistudio.core.numerics.evaluators.recognize import model_facts, recognize_task


def recognized(path: Path) -> tuple[str, list[str], str]:
    found = recognize_task(model_facts(path))
    assert found is not None, "no task recognized"
    info, recognition = found
    return info.name, recognition.outputs, recognition.reason


@pytest.mark.parametrize(
    ("options", "reason_has"),
    [
        ({}, "output0 [N, 84, 8400]: cx, cy, w, h and 80 class scores for 8400 anchors"),
        ({"anchors": 2100, "classes": 1}, "1 class scores for 2100 anchors (grids at strides 8"),
        ({"anchors_last": False, "anchors": 25200}, "[N, 25200, 85]: cx, cy, w, h, objectness"),
        ({"anchors": "anchors"}, "[N, 84, ?]: cx, cy, w, h and 80 class scores for each anchor"),
    ],
    ids=["yolov8", "yolov8-320-one-class", "yolov5", "yolov8-dynamic-anchors"],
)
def test_raw_yolo_predictions_are_object_detection(
    tmp_path: Path, options: dict, reason_has: str
) -> None:
    task, outputs, reason = recognized(yolo_model(tmp_path / "m.onnx", **options))

    assert (task, outputs) == ("detection_boxes", ["output0"])
    assert reason_has in reason
    family = "YOLOv8/v11" if options.get("anchors_last", True) else "YOLOv5/YOLOX"
    assert f"a {family}-style detector before NMS" in reason


def test_anchor_counts_of_no_stride_grid_are_not_taken_for_yolo(tmp_path: Path) -> None:
    """CTC logits [N, 40, 6625] without a charset: 6625 anchors fit no grid of strides."""
    path = ctc_logits_model(tmp_path / "m.onnx", classes=6625, charset=[])
    model = onnx.load(str(path))
    del model.metadata_props[:]
    onnx.save(model, path)

    found = recognize_task(model_facts(path))

    assert found is None or found[0].name != "detection_boxes"


def test_a_yolo_shape_not_made_by_a_concat_is_not_taken_for_yolo(tmp_path: Path) -> None:
    """A sequence model's features [N, 84, 8400] from a plain node: not boxes and scores."""
    path = save(
        tmp_path / "m.onnx",
        [helper.make_node("Relu", ["x"], ["output0"])],
        [tensor("x", ["N", 84, 8400])],
        [tensor("output0", ["N", 84, 8400])],
    )

    found = recognize_task(model_facts(path))

    assert found is None or found[0].name != "detection_boxes"


def test_setting_the_detection_task_on_yolov8_is_accepted(tmp_path: Path) -> None:
    facts = model_facts(yolo_model(tmp_path / "m.onnx", anchors=2100))

    found = recognize_task(facts, task="detection_boxes", outputs=["output0"])

    assert found is not None and found[1].outputs == ["output0"]


def test_nms_rows_with_a_batch_index_are_recognized(tmp_path: Path) -> None:
    task, outputs, reason = recognized(indexed_rows_model(tmp_path / "m.onnx"))

    assert (task, outputs) == ("detection_boxes", ["dets"])
    assert "rows of batch index, x1, y1, x2, y2, class, score" in reason


def test_picodet_heads_are_paired_scores_first_finest_first(tmp_path: Path) -> None:
    task, outputs, reason = recognized(picodet_heads_model(tmp_path / "m.onnx", (4, 16)))

    assert task == "detection_boxes"
    assert outputs == ["cls1", "reg1", "cls0", "reg0"]
    assert reason.startswith("2 heads, cls1 [N, 16, 3] with reg1 [N, 16, 32]")


def test_argmax_ids_are_a_ctc_recognizer(tmp_path: Path) -> None:
    task, outputs, reason = recognized(argmax_ids_model(tmp_path / "m.onnx"))

    assert (task, outputs) == ("ctc_text", ["ids"])
    assert "ids [N, T] of class ids made by ArgMax inside the model" in reason


# end to end ----------------------------------------------------------------------------------


def yolov8_like(path: Path, *, shift: float = 0.0, anchors: int = 84) -> Path:
    """raw [1, 6, A] -> cx, cy (+ shift), |w| + 1, |h| + 1 and two Sigmoid class scores,
    joined on axis 1: the YOLOv8 layout, with boxes of positive size from random inputs."""
    constants = {
        "shift": np.array([shift, shift, 0, 0], np.float32).reshape(1, 4, 1),
        "one": np.array([0, 0, 1, 1], np.float32).reshape(1, 4, 1),
        "splits": np.array([4, 2], np.int64),
    }
    nodes = [
        helper.make_node("Split", ["raw", "splits"], ["box_raw", "cls_raw"], axis=1),
        helper.make_node("Abs", ["box_raw"], ["box_abs"]),
        helper.make_node("Add", ["box_abs", "one"], ["box_sized"]),
        helper.make_node("Add", ["box_sized", "shift"], ["box"]),
        helper.make_node("Sigmoid", ["cls_raw"], ["cls"]),
        helper.make_node("Concat", ["box", "cls"], ["output0"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "yolo",
        [helper.make_tensor_value_info("raw", TensorProto.FLOAT, [1, 6, anchors])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 6, anchors])],
        initializer=[numpy_helper.from_array(value, name) for name, value in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


@pytest.mark.parametrize(
    ("shift", "passes"), [(0.0, True), (2.5, False)], ids=["identical", "shifted-boxes"]
)
def test_a_yolov8_variant_is_judged_by_its_boxes_end_to_end(
    tmp_path: Path, shift: float, passes: bool
) -> None:
    original = yolov8_like(tmp_path / "a.onnx")
    variant = yolov8_like(tmp_path / "b.onnx", shift=shift)
    found = recognize_task(model_facts(original))
    assert found is not None and found[0] == DETECTION_BOXES
    info, recognition = found
    data = SyntheticDataset(inspect_model(original).inputs, samples=4)

    report = accuracy_report(original, variant, data, judge=TaskJudge(info.create(), recognition))
    ok, why = within_budget(report, AccuracyBudget(), TaskBudget(info, {"f1": 0.95}))

    assert report.task == "detection_boxes" and report.samples == 4
    assert ok is passes, why
    assert report.task_note.startswith("read as raw predictions [N, 4 + classes, anchors]")
    assert report.task_metrics["f1"] == (1.0 if passes else pytest.approx(0.0, abs=0.2))


def test_a_picodet_on_a_non_square_input_is_judged_on_its_grid_end_to_end(
    tmp_path: Path,
) -> None:
    model = picodet_image_model(tmp_path / "m.onnx", height=48, width=32)
    found = recognize_task(model_facts(model))
    assert found is not None and found[0] == DETECTION_BOXES
    info, recognition = found
    data = SyntheticDataset(inspect_model(model).inputs, samples=2)

    report = accuracy_report(model, model, data, judge=TaskJudge(info.create(), recognition))

    assert recognition.image_size == (48, 32)
    assert recognition.outputs == ["cls0", "reg0", "cls1", "reg1"]
    assert report.task_note.startswith("read as per-head class scores and box distributions")
    assert report.task_metrics["f1"] == 1.0
