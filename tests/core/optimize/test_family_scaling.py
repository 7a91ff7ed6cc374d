"""A PP-OCR export is fed its family's normalisation (-1..1 for a recognizer's lines, ImageNet
for a detector's pages) ahead of the probe's most confident candidate; a graph that shows no
family is still probed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.data.builtin import scaling
from optistudio.core.data.datasets import SyntheticDataset
from optistudio.core.model.intake import inspect_model
from optistudio.core.optimize.no_data import without_data

CLASSES = 97  # PP-OCR's English alphabet with the blank and a space


def line_recognizer(path: Path, *, producer: str, input_name: str = "x") -> Path:
    """input [N, 3, 48, W] -> Conv(97, 48 x 8, stride 48 x 8) -> [N, W / 8, 97] -> Softmax: a
    CTC head whose logits grow with the input's range, so the widest range looks most sure."""
    rng = np.random.default_rng(0)
    weights = {
        "w": rng.standard_normal((CLASSES, 3, 48, 8)).astype(np.float32) * 0.05,
        "h_axis": np.array([2], np.int64),
    }
    nodes = [
        helper.make_node("Conv", [input_name, "w"], ["c"], strides=[48, 8]),
        helper.make_node("Squeeze", ["c", "h_axis"], ["squeezed"]),
        helper.make_node("Transpose", ["squeezed"], ["steps"], perm=[0, 2, 1]),
        helper.make_node("Softmax", ["steps"], ["softmax_0.tmp_0"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "rec",
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, ["N", 3, 48, "W"])],
        [helper.make_tensor_value_info("softmax_0.tmp_0", TensorProto.FLOAT, ["N", "T", CLASSES])],
        initializer=[numpy_helper.from_array(value, key) for key, value in weights.items()],
    )
    model = helper.make_model(
        graph, producer_name=producer, opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 8
    onnx.save(model, path)
    return path


def chosen_normalisation(path: Path, task: str = "ctc_text") -> str:
    inputs = inspect_model(path).inputs
    base = SyntheticDataset(inputs, samples=4, shapes={inputs[0].name: [1, 3, 48, 320]})
    return without_data(path, base, task, "softmax_0.tmp_0").description


def test_a_paddle_recognizer_is_fed_minus_one_to_one_over_the_probes_pick(tmp_path: Path) -> None:
    other = line_recognizer(tmp_path / "other.onnx", producer="pytorch", input_name="image")
    probed = chosen_normalisation(other)
    family = chosen_normalisation(line_recognizer(tmp_path / "rec.onnx", producer="paddle2onnx"))

    assert "most confident" in probed and "ImageNet mean/std (the FP32" in probed
    assert "-1..1 (PP-OCR's recognizers and direction classifiers feed it" in family
    assert "producer is 'paddle2onnx'" in family and "most confident" not in family


def test_an_input_x_with_a_ppocr_alphabets_classes_shows_the_family(tmp_path: Path) -> None:
    path = line_recognizer(tmp_path / "rec.onnx", producer="")

    said = chosen_normalisation(path)

    assert said.count("-1..1 (PP-OCR's") == 1 and "97 output classes" in said


def test_a_paddle_text_detector_is_fed_imagenet_mean_and_std(tmp_path: Path) -> None:
    model = onnx.load(str(line_recognizer(tmp_path / "det.onnx", producer="PaddlePaddle")))

    found = scaling.family_scaling(model, "x", "text pages")

    assert found is not None and found[0] == scaling.IMAGENET
    assert found[1].startswith("ImageNet mean/std (PP-OCR's detectors feed it")
    assert scaling.family_scaling(model, "x", "photos") is None
