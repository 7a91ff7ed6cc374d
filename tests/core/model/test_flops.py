from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.model.flops import estimate_flops


def single_op_model(
    op: str,
    x_shape: list,
    weight_shape: list[int],
    y_shape: list,
    **attrs: object,
) -> onnx.ModelProto:
    """y = op(x, w) with w an initializer; output shape left for inference to fill."""
    weight = numpy_helper.from_array(np.zeros(weight_shape, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node(op, ["x", "w"], ["y"], **attrs)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        initializer=[weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


CASES = [
    # Conv: MACs = |Y| x C/group x kh x kw; Y = [1, 4, 8, 8] with pads 1.
    pytest.param(
        single_op_model("Conv", [1, 3, 8, 8], [4, 3, 3, 3], None, pads=[1, 1, 1, 1]),
        2 * (1 * 4 * 8 * 8) * (3 * 3 * 3),
        id="conv-3x3-pad1",
    ),
    # Grouped: 4 input channels in 2 groups, each output sees 2 channels; Y = [1, 4, 6, 6].
    pytest.param(
        single_op_model("Conv", [1, 4, 8, 8], [4, 2, 3, 3], None, group=2),
        2 * (1 * 4 * 6 * 6) * (2 * 3 * 3),
        id="conv-grouped",
    ),
    # ConvTranspose: every input element scatters into M/group x kh x kw outputs.
    pytest.param(
        single_op_model("ConvTranspose", [1, 3, 4, 4], [3, 5, 2, 2], None, strides=[2, 2]),
        2 * (1 * 3 * 4 * 4) * (5 * 2 * 2),
        id="conv-transpose",
    ),
    # MatMul batched: [2, 5, 3] x [3, 4] -> [2, 5, 4], K = 3.
    pytest.param(
        single_op_model("MatMul", [2, 5, 3], [3, 4], None),
        2 * (2 * 5 * 4) * 3,
        id="matmul-batched",
    ),
    # Gemm with transB: [5, 3] x [4, 3]^T -> [5, 4], K = 3.
    pytest.param(
        single_op_model("Gemm", [5, 3], [4, 3], None, transB=1),
        2 * (5 * 4) * 3,
        id="gemm-transB",
    ),
    # Gemm with transA: A is [K, M] = [3, 5].
    pytest.param(
        single_op_model("Gemm", [3, 5], [3, 4], None, transA=1),
        2 * (5 * 4) * 3,
        id="gemm-transA",
    ),
    pytest.param(single_op_model("Add", [2, 3], [2, 3], None), 0, id="no-heavy-ops"),
]


@pytest.mark.parametrize(("model", "expected"), CASES)
def test_flops_exact(model: onnx.ModelProto, expected: int) -> None:
    assert estimate_flops(model) == expected


@pytest.mark.parametrize(
    ("default_dim", "expected"),
    [
        pytest.param(1, 2 * (1 * 5 * 4) * 3, id="batch-1"),
        pytest.param(8, 2 * (8 * 5 * 4) * 3, id="batch-8"),
    ],
)
def test_dynamic_dims_take_default_dim(default_dim: int, expected: int) -> None:
    model = single_op_model("MatMul", ["batch", 5, 3], [3, 4], None)

    assert estimate_flops(model, default_dim=default_dim) == expected


def test_input_shapes_override_default_dim() -> None:
    model = single_op_model("Conv", ["batch", 3, "h", "w"], [4, 3, 3, 3], None, pads=[1, 1, 1, 1])

    flops = estimate_flops(model, input_shapes={"x": (2, 3, 10, 10)})

    assert flops == 2 * (2 * 4 * 10 * 10) * (3 * 3 * 3)


def test_input_model_is_not_modified() -> None:
    model = single_op_model("MatMul", ["batch", 5, 3], [3, 4], None)
    before = model.SerializeToString()

    estimate_flops(model, default_dim=4)

    assert model.SerializeToString() == before


def test_unknown_shape_gives_none() -> None:
    model = single_op_model("MatMul", [2, 5, 3], [3, 4], None)
    model.graph.input[0].type.tensor_type.ClearField("shape")

    assert estimate_flops(model) is None
