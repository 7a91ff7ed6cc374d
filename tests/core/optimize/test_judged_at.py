"""An already-quantized graph's variants are held to the INT8 tolerance rule, not FP32's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.model.intake import inspect_model
from optistudio.core.numerics.tolerances import rule_for
from optistudio.core.optimize.recipes import get_recipe
from optistudio.core.optimize.run import judged_at
from optistudio.core.optimize.variant import VariantResult


def _model(path: Path, *, qdq: bool) -> Path:
    scale = numpy_helper.from_array(np.array(0.05, dtype=np.float32), "scale")
    zero = numpy_helper.from_array(np.array(0, dtype=np.int8), "zero")
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"]),
    ]
    if not qdq:
        nodes = [helper.make_node("Relu", ["x"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        initializer=[scale, zero] if qdq else [],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.save(model, path)
    return path


def test_an_already_quantized_graph_is_judged_by_the_int8_rule(tmp_path: Path) -> None:
    variant = VariantResult(recipe=get_recipe("fp32"), precision="fp32", backend="openvino")

    quantized = inspect_model(_model(tmp_path / "qdq.onnx", qdq=True))
    plain = inspect_model(_model(tmp_path / "plain.onnx", qdq=False))

    assert rule_for(judged_at(variant, quantized)).precision == "int8"
    assert rule_for(judged_at(variant, plain)).precision == "fp32"
