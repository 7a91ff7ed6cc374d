"""Operators in ONNX's own domains that ONNX does not define: found (subgraphs too), left to the
runtime's load instead of refused by the checker."""

from __future__ import annotations

from pathlib import Path

import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from optimize_models import layer_norm_model, rms_norm_model

from optistudio.core.backends.loadable import check_loads
from optistudio.core.errors import ModelRejected
from optistudio.core.model.intake import inspect_model
from optistudio.core.model.undefined_ops import undefined_ops


def ort_optimized(model: Path, out: Path) -> Path:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(out)
    ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    return out


def one_node_model(op: str, *, domain: str = "", opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], domain=domain)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(graph, ir_version=8, opset_imports=opsets)


def in_an_if_branch(inner: onnx.ModelProto) -> onnx.ModelProto:
    branch = inner.graph
    node = helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)
    graph = helper.make_graph(
        [node],
        "outer",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    return helper.make_model(graph, ir_version=8, opset_imports=inner.opset_import)


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        pytest.param(one_node_model("Relu"), [], id="standard"),
        pytest.param(
            one_node_model("LayerNormalization", opset=13), ["LayerNormalization"], id="ln-13"
        ),
        pytest.param(one_node_model("LayerNormalization", opset=17), [], id="ln-17"),
        pytest.param(one_node_model("FusedGemm", domain="com.microsoft"), [], id="other-domain"),
        pytest.param(
            in_an_if_branch(one_node_model("SimplifiedLayerNormalization")),
            ["SimplifiedLayerNormalization"],
            id="in-subgraph",
        ),
    ],
)
def test_undefined_ops_are_those_onnx_lacks_at_the_models_opset(model, expected) -> None:
    assert undefined_ops(model) == expected


@pytest.mark.parametrize("build", [rms_norm_model, layer_norm_model], ids=["rmsnorm", "layernorm"])
def test_a_model_onnx_runtime_optimized_is_accepted_when_it_loads(tmp_path: Path, build) -> None:
    optimized = ort_optimized(build(tmp_path / "m.onnx"), tmp_path / "optimized.onnx")

    info = inspect_model(optimized, load_check=check_loads)

    assert info.node_count == 1


def test_an_undefined_op_that_does_not_load_is_refused_by_the_load_check(tmp_path: Path) -> None:
    path = tmp_path / "foo.onnx"
    onnx.save(one_node_model("NoSuchOp"), path)

    with pytest.raises(ModelRejected, match="operator NoSuchOp from domain ai.onnx"):
        inspect_model(path, load_check=check_loads)
