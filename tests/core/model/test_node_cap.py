"""A model of more nodes than the cap is refused by intake from its parsed protobuf, before the
checker or a runtime walks them (issue 39, case 5: 200,000 Identity nodes in 5.8 MB took
15 s and 780 MB and were accepted); subgraphs and local functions count too."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from optistudio.core.errors import ModelRejected
from optistudio.core.model.declared_sizes import check_declared_sizes
from optistudio.core.model.intake import inspect_model
from optistudio.core.model.node_count import (
    DEFAULT_MAX_NODES,
    MAX_NODES_ENV,
    count_nodes,
    node_cap,
)


def identity_chain(count: int) -> onnx.ModelProto:
    """x -> Identity -> ... -> y, `count` nodes, built field by field (helper is slow here)."""
    graph = onnx.GraphProto(name="chain")
    for index in range(count):
        node = graph.node.add()
        node.op_type = "Identity"
        node.input.append(f"t{index}" if index else "x")
        node.output.append(f"t{index + 1}" if index + 1 < count else "y")
    graph.input.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]))
    graph.output.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, [1]))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_intake_refuses_200000_nodes_naming_the_count_and_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(MAX_NODES_ENV, raising=False)
    path = tmp_path / "chain.onnx"
    onnx.save(identity_chain(200_000), path)

    with pytest.raises(ModelRejected) as refused:
        inspect_model(path)

    assert refused.value.message == (
        "The model holds 200,000 nodes (subgraphs and functions included), more than the "
        "100,000 this studio checks."
    )
    assert MAX_NODES_ENV in (refused.value.hint or "")


def test_nodes_in_subgraphs_and_functions_count() -> None:
    branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], [f"b{i}"]) for i in range(3)],
        "branch",
        [],
        [helper.make_tensor_value_info("b0", TensorProto.FLOAT, [1])],
    )
    condition = helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)
    function = helper.make_function(
        "local", "twice", ["a"], ["b"], [helper.make_node("Identity", ["a"], ["b"])] * 2,
        [helper.make_opsetid("", 17)],
    )  # fmt: skip
    model = identity_chain(2)
    model.graph.node.append(condition)
    model.functions.append(function)

    assert count_nodes(model) == 2 + 1 + 3 + 3 + 2
    check_declared_sizes(model, 1 << 30, max_nodes=11)
    with pytest.raises(ModelRejected, match="holds 11 nodes .* more than the 10 this"):
        check_declared_sizes(model, 1 << 30, max_nodes=10)


def test_the_cap_is_set_by_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MAX_NODES_ENV, raising=False)
    assert node_cap() == DEFAULT_MAX_NODES == 100_000
    monkeypatch.setenv(MAX_NODES_ENV, "250000")
    assert node_cap() == 250_000
    check_declared_sizes(identity_chain(200_001), 1 << 30)
    monkeypatch.setenv(MAX_NODES_ENV, "3")
    with pytest.raises(ModelRejected, match="holds 4 nodes"):
        check_declared_sizes(identity_chain(4), 1 << 30)
