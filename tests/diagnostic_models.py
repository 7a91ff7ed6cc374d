"""Tiny models for the diagnostics tests, each built to trigger (or not) one explainer rule."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.data.datasets import SyntheticDataset
from optistudio.core.model.intake import inspect_model


def build_cnn(path: Path) -> Path:
    """conv1 -> relu1 -> conv2 -> gap -> flat: [n, 3, 16, 16] -> [n, 8]."""
    rng = np.random.default_rng(0)
    weights = {
        "w1": rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3,
        "b1": np.zeros(8, np.float32),
        "w2": rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.3,
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["c2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["y"], name="flat"),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])],
        initializer=[numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    return _save(graph, path)


def quantize_cnn(source: Path, path: Path, *, mode: str, exclude: list[str] | None = None) -> Path:
    """The CNN quantized by ONNX Runtime: mode 'static' (QDQ) or 'dynamic' (ConvInteger)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        quantize_dynamic,
        quantize_static,
    )

    logging.getLogger().setLevel(logging.ERROR)  # the quantizer's "consider pre-processing"
    if mode == "dynamic":
        quantize_dynamic(source, path, op_types_to_quantize=["Conv"])
        return path
    batches = iter(SyntheticDataset(inspect_model(source).inputs, samples=8).batches())

    class Reader(CalibrationDataReader):
        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(batches, None)

    quantize_static(
        source, path, Reader(), quant_format=QuantFormat.QDQ, nodes_to_exclude=exclude or []
    )
    return path


def build_qdq_erf(path: Path) -> Path:
    """x -> Q -> DQ -> Erf -> Q -> DQ -> y: an op with no integer kernel between Q/DQ pairs."""
    scale = numpy_helper.from_array(np.array(0.05, np.float32), "s")
    zero = numpy_helper.from_array(np.array(0, np.uint8), "z")
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="x_q"),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="x_dq"),
        helper.make_node("Erf", ["xd"], ["e"], name="erf"),
        helper.make_node("QuantizeLinear", ["e", "s", "z"], ["eq"], name="e_q"),
        helper.make_node("DequantizeLinear", ["eq", "s", "z"], ["y"], name="e_dq"),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq_erf",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 64])],
        initializer=[scale, zero],
    )
    return _save(graph, path)


def build_unloadable(path: Path) -> Path:
    """A valid ONNX file whose op no runtime has (custom domain): intake passes, loading fails."""
    graph = helper.make_graph(
        [helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example", name="frob")],
        "unloadable",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    )
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path
