"""Card facts that are true: weights the graph generates are parameters, and a file quantized
as uploaded says so in every precision label instead of reading "fp32"."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.model.info import precision_label, quantized_formats, quantized_note
from optistudio.core.model.intake import inspect_model
from optistudio.core.model.parameters import generated_elements, parameter_count


def generated_weights_model() -> onnx.ModelProto:
    """y = x @ W1 + B, W1 [64, 256] drawn by RandomNormal, B [256] filled by ConstantOfShape
    from a stored shape: 2 stored elements (the shape of B) and 64 * 256 + 256 generated."""
    shape = numpy_helper.from_array(np.array([256], dtype=np.int64), "b_shape")
    nodes = [
        helper.make_node("RandomNormal", [], ["w"], shape=[64, 256], seed=1.0),
        helper.make_node(
            "ConstantOfShape",
            ["b_shape"],
            ["b"],
            value=numpy_helper.from_array(np.array([0.5], dtype=np.float32)),
        ),
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "generated",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])],
        initializer=[shape],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_weights_generated_in_the_graph_are_counted(tmp_path: Path) -> None:
    model = generated_weights_model()
    onnx.checker.check_model(model)
    path = tmp_path / "generated.onnx"
    onnx.save(model, path)

    info = inspect_model(path)

    assert generated_elements(model) == 64 * 256 + 256
    assert info.parameter_count == parameter_count(model) == 1 + 1 + 64 * 256 + 256
    # the ConstantOfShape's value (1 element) and its stored shape (1) stay counted as stored


def test_a_generator_fed_by_an_input_is_no_weight() -> None:
    model = generated_weights_model()
    model.graph.node[1].input[0] = "x_shape"  # the fill's shape now comes from an input
    model.graph.input.append(helper.make_tensor_value_info("x_shape", TensorProto.INT64, [1]))

    assert generated_elements(model) == 64 * 256  # only RandomNormal's fixed draw


def test_a_model_with_stored_weights_counts_as_before() -> None:
    weight = numpy_helper.from_array(np.ones((8, 4), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "stored",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        initializer=[weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    assert generated_elements(model) == 0 and parameter_count(model) == 32


@pytest.mark.parametrize(
    ("ops", "formats", "label"),
    [
        ({"QuantizeLinear": 2, "DequantizeLinear": 4, "Conv": 1}, ["QDQ"], "already quantized (QDQ)"),
        ({"QLinearConv": 3, "QuantizeLinear": 1}, ["QDQ", "QLinear"], "already quantized (QDQ / QLinear)"),
        ({"ConvInteger": 1, "DynamicQuantizeLinear": 1}, ["ConvInteger"], "already quantized (ConvInteger)"),
        ({"Conv": 3, "Relu": 3}, [], "fp32"),
    ],
    ids=["qdq", "qlinear", "conv-integer", "float"],
)  # fmt: skip
def test_a_quantized_file_is_labelled_quantized_not_fp32(
    ops: dict[str, int], formats: list[str], label: str
) -> None:
    assert quantized_formats(ops) == formats
    assert precision_label("fp32", ops) == label  # an upload is stored as fp32
    assert precision_label(None, ops) == label
    assert precision_label("int8", ops) == "int8"  # a label that already says so stays


def test_a_variant_of_a_quantized_original_stays_labelled_quantized() -> None:
    qdq = {"QuantizeLinear": 2, "DequantizeLinear": 2}

    assert precision_label("fp16", qdq) == "fp16, already quantized (QDQ)"
    assert quantized_note({"Conv": 1}) == ""
