"""Tiny models shaped the way real exporters write them, for the fixes the model zoo prompted
(bench/zoo.py): scikit-learn's ZipMap output, an IR-3 file with its weights listed as inputs,
weights in an external data file, and an output whose first dim is not the batch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FLOAT = TensorProto.FLOAT


def zipmap_model(path: Path) -> Path:
    """X [N, 3] -> softmax -> `label` int64 [N] and `probabilities`, a sequence of
    {class: probability} maps (skl2onnx's default ZipMap)."""
    weights = numpy_helper.from_array(np.arange(9, dtype=np.float32).reshape(3, 3) / 10, "w")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "w"], ["scores"]),
            helper.make_node("Softmax", ["scores"], ["probs"], axis=1),
            helper.make_node("ArgMax", ["probs"], ["label"], axis=1, keepdims=0),
            helper.make_node(
                "ZipMap",
                ["probs"],
                ["probabilities"],
                domain="ai.onnx.ml",
                classlabels_int64s=[0, 1, 2],
            ),
        ],
        "zipmap",
        [helper.make_tensor_value_info("X", FLOAT, [None, 3])],
        [
            helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
            helper.make_value_info(
                "probabilities",
                helper.make_sequence_type_proto(
                    helper.make_map_type_proto(
                        TensorProto.INT64, helper.make_tensor_type_proto(FLOAT, [])
                    )
                ),
            ),
        ],
        initializer=[weights],
    )
    opsets = [helper.make_opsetid("", 13), helper.make_opsetid("ai.onnx.ml", 1)]
    return _save(helper.make_model(graph, opset_imports=opsets), path, ir_version=8)


def ir3_model(path: Path) -> Path:
    """Conv -> Relu at opset 7, IR 3, its weights also listed as graph inputs (as IR 3 wanted)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = np.zeros(4, np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["data_0", "conv1_w_0", "conv1_b_0"], ["c"], pads=[1] * 4),
            helper.make_node("Relu", ["c"], ["out"]),
        ],
        "legacy",
        [
            helper.make_tensor_value_info("data_0", FLOAT, [1, 3, 8, 8]),
            helper.make_tensor_value_info("conv1_w_0", FLOAT, list(w.shape)),
            helper.make_tensor_value_info("conv1_b_0", FLOAT, list(b.shape)),
        ],
        [helper.make_tensor_value_info("out", FLOAT, [1, 4, 8, 8])],
        initializer=[
            numpy_helper.from_array(w, "conv1_w_0"),
            numpy_helper.from_array(b, "conv1_b_0"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 7)])
    return _save(model, path, ir_version=3)


def external_data_model(path: Path) -> Path:
    """y = x @ W with W (64 x 64) in `weights.bin` beside the model."""
    w = np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "external",
        [helper.make_tensor_value_info("x", FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", FLOAT, ["batch", 64])],
        initializer=[numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path), save_as_external_data=True, location="weights.bin",
              size_threshold=0)  # fmt: skip
    return path


def rows_not_batch_model(path: Path) -> Path:
    """x [batch, 4] -> `rows` [2 x batch, 4] (x stacked on itself): its dim 0 is dynamic, yet not
    one row per request, as a detector's NMS indices [detections, 3]."""
    graph = helper.make_graph(
        [helper.make_node("Concat", ["x", "x"], ["rows"], axis=0)],
        "rows",
        [helper.make_tensor_value_info("x", FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("rows", FLOAT, ["rows", 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return _save(model, path, ir_version=8)


def _save(model: onnx.ModelProto, path: Path, *, ir_version: int) -> Path:
    model.ir_version = ir_version
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path
