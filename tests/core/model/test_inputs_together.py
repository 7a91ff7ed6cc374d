"""A model's fixed-shape inputs are budgeted together, not only one by one (issue 39, case 8:
four [2^31] float32 inputs, 8 GiB each and 32 GiB in one run, were accepted on a 24 GiB
machine whose per-tensor budget is 12 GiB)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from optistudio.core.errors import ModelRejected
from optistudio.core.model.declared_sizes import check_declared_sizes
from optistudio.core.model.intake import inspect_model

GIB = 1024**3
SIDE = 1 << 31


def four_big_inputs(path: Path) -> Path:
    names = ["a", "b", "c", "d"]
    graph = helper.make_graph(
        [helper.make_node("Sum", names, ["y"])],
        "four",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [SIDE]) for name in names],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [SIDE])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_intake_refuses_inputs_that_only_together_exceed_the_budget(tmp_path: Path) -> None:
    path = four_big_inputs(tmp_path / "four.onnx")

    with pytest.raises(ModelRejected) as refused:
        inspect_model(path, max_tensor_bytes=12 * GIB)

    assert refused.value.message == (
        "The model's inputs together ('a' [2147483648], 'b' [2147483648], 'c' [2147483648], "
        "'d' [2147483648]) declare 32.0 GiB, over the 12.0 GiB budget for what one run holds."
    )
    assert "OPTISTUDIO_MAX_TENSOR_MB" in (refused.value.hint or "")


def test_inputs_within_the_budget_together_pass(tmp_path: Path) -> None:
    model = onnx.load(str(four_big_inputs(tmp_path / "four.onnx")))
    check_declared_sizes(model, 32 * GIB)
    with pytest.raises(ModelRejected, match="inputs together"):
        check_declared_sizes(model, 32 * GIB - 1)


def test_dynamic_dims_and_initializers_listed_as_inputs_are_not_summed() -> None:
    weight = helper.make_tensor("w", TensorProto.FLOAT, [4], [1.0] * 4)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "z"], ["y"])],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4]),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
        initializer=[weight],
    )
    model = helper.make_model(graph)
    check_declared_sizes(model, 32)  # x and z count their dynamic dim as 1; w is a weight
    with pytest.raises(ModelRejected, match=r"together \('x' \[nx4\], 'z' \[nx4\]\) declare"):
        check_declared_sizes(model, 31)
