"""Accuracy in a task's terms through `accuracy_report`: a detector whose NMS keeps a different
number of boxes than the original's is judged by its boxes, not refused for its shapes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.data.datasets import SyntheticDataset
from optistudio.core.model.intake import inspect_model
from optistudio.core.numerics.accuracy import TaskJudge, accuracy_report
from optistudio.core.numerics.evaluators.recognize import model_facts, recognize_task


def thresholded_detector(path: Path, threshold: float) -> Path:
    """rows [1, 8, 5] of x, y, w, h, logit -> boxes [K, 4] (corners, sides >= 0.5) and
    scores [K] of the rows whose sigmoid(logit) > threshold."""
    constants = {
        "t": np.array(threshold, np.float32),
        "four": np.array([4], np.int64),
        "zero": np.array([0], np.int64),
        "five": np.array([5], np.int64),
        "two": np.array([2], np.int64),
    }
    nodes = [
        helper.make_node("Squeeze", ["rows", "zero"], ["flat"]),
        helper.make_node("Slice", ["flat", "four", "five", "two"], ["score_col"]),
        helper.make_node("Sigmoid", ["score_col"], ["prob_col"]),
        helper.make_node("Squeeze", ["prob_col", "two_d"], ["prob"]),
        helper.make_node("Greater", ["prob", "t"], ["keep"]),
        helper.make_node("Compress", ["flat", "keep"], ["kept"], axis=0),
        helper.make_node("Slice", ["kept", "zero", "two_cols", "two"], ["corner"]),
        helper.make_node("Slice", ["kept", "two_cols", "four", "two"], ["raw_size"]),
        helper.make_node("Abs", ["raw_size"], ["size"]),
        helper.make_node("Add", ["size", "min_side"], ["side"]),
        helper.make_node("Add", ["corner", "side"], ["far"]),
        helper.make_node("Concat", ["corner", "far"], ["boxes"], axis=1),
        helper.make_node("Compress", ["prob", "keep"], ["scores"], axis=0),
    ]
    constants["two_d"] = np.array([1], np.int64)
    constants["two_cols"] = np.array([2], np.int64)
    constants["min_side"] = np.array(0.5, np.float32)
    constants["two"] = np.array([1], np.int64)  # the axis the column slices run along
    graph = helper.make_graph(
        nodes,
        "detector",
        [helper.make_tensor_value_info("rows", TensorProto.FLOAT, [1, 8, 5])],
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["k", 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["k"]),
        ],
        initializer=[numpy_helper.from_array(v, k) for k, v in constants.items()],
    )
    model = helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def test_a_detector_keeping_fewer_boxes_is_judged_by_its_boxes(tmp_path: Path) -> None:
    original = thresholded_detector(tmp_path / "a.onnx", 0.3)
    stricter = thresholded_detector(tmp_path / "b.onnx", 0.6)  # drops the boxes in between
    info, recognition = recognize_task(model_facts(original))
    data = SyntheticDataset(inspect_model(original).inputs, samples=6)

    report = accuracy_report(original, stricter, data, judge=TaskJudge(info.create(), recognition))

    assert report.task == "detection_boxes"
    assert report.task_metrics["precision"] == 1.0  # every box it keeps, the original has
    assert report.task_metrics["recall"] < 1.0
    assert report.worst and report.worst[0].sample < 6
    assert "differ in shape" in report.note


def test_the_same_detector_agrees_with_itself(tmp_path: Path) -> None:
    original = thresholded_detector(tmp_path / "a.onnx", 0.3)
    info, recognition = recognize_task(model_facts(original))
    data = SyntheticDataset(inspect_model(original).inputs, samples=4)

    report = accuracy_report(original, original, data, judge=TaskJudge(info.create(), recognition))

    assert report.task_metrics["f1"] == 1.0 and report.worst == []
    assert report.mean_cosine == 1.0
