"""check_loads: ONNX Runtime's load errors as refusals that name the cause, never the path."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from optistudio.core.backends.loadable import check_loads, load_refusal
from optistudio.core.errors import ModelRejected


def relu_model(*, opset: int, ir_version: int = 8) -> onnx.ModelProto:
    value = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [value],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    return helper.make_model(
        graph, ir_version=ir_version, opset_imports=[helper.make_opsetid("", opset)]
    )


def refused(model: onnx.ModelProto, path: Path) -> ModelRejected:
    onnx.save(model, path)
    with pytest.raises(ModelRejected) as caught:
        check_loads(path)
    return caught.value


def test_a_loadable_model_passes(tiny_model: Path) -> None:
    check_loads(tiny_model)


def test_an_opset_newer_than_the_runtime_is_blamed_on_the_opset(tmp_path: Path) -> None:
    error = refused(relu_model(opset=99), tmp_path / "m.onnx")

    assert "opset 99 of domain ai.onnx, newer than this ONNX Runtime supports" in error.message
    assert error.hint and "or lower" in error.hint
    assert "onnxruntime_src" not in error.message


def test_an_opset_older_than_the_runtime_runs_is_blamed_on_the_opset(tmp_path: Path) -> None:
    error = refused(relu_model(opset=3, ir_version=3), tmp_path / "m.onnx")

    assert error.message == "The model uses opset 3; ONNX Runtime runs opset 7 and later."
    assert error.hint and "version_converter" in error.hint


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        pytest.param(
            "[ONNXRuntimeError] : 1 : FAIL : Load model from {path} failed:Fatal error: "
            "com.acme:FancyOp(-1) is not a registered function/op",
            "The model uses the operator FancyOp from domain com.acme, which no backend here "
            "implements.",
            id="unregistered-op",
        ),
        pytest.param(
            "[ONNXRuntimeError] : 1 : FAIL : Load model from {path} failed:Node () Op (If) "
            "[TypeInferenceError] Graph attribute inferencing failed: Fatal error: "
            "com.acme:FancyOp(-1) is not a registered function/op",
            "The model uses the operator FancyOp from domain com.acme, which no backend here "
            "implements.",
            id="unregistered-op-in-a-subgraph",
        ),
        pytest.param(
            "[ONNXRuntimeError] : 10 : INVALID_GRAPH : Load model from {path} failed:This is an "
            'invalid model. In Node, ("n", FancyOp, "com.acme", -1) : ("x": tensor(float),) -> '
            '("y": tensor(float),) , Error No Op registered for FancyOp with domain_version of 1',
            "The model uses the operator FancyOp from domain com.acme, which no backend here "
            "implements.",
            id="unregistered-op-older-runtime",
        ),
        pytest.param(
            "[ONNXRuntimeError] : 1 : FAIL : Load model from {path} failed:Unsupported model IR "
            "version: 13, max supported IR version: 11",
            "The model's IR version 13 is newer than this ONNX Runtime reads (up to 11).",
            id="ir-too-new",
        ),
        pytest.param(
            "[ONNXRuntimeError] : 1 : FAIL : Load model from {path} failed:/onnxruntime_src/"
            "onnxruntime/core/graph/graph.cc:12 void onnxruntime::Graph::F(const std::string&, "
            "int) Something odd in {path}\nsecond line",
            "ONNX Runtime could not load the model: Something odd in m.onnx",
            id="other-first-line-without-path-or-source",
        ),
    ],
)
def test_refusal_names_the_cause_without_the_path(
    tmp_path: Path, message: str, expected: str
) -> None:
    path = tmp_path / "incoming" / "m.onnx"

    error = load_refusal(message.format(path=path), path)

    assert error.message == expected
    assert str(tmp_path) not in error.message + (error.hint or "")
    if "opset" not in expected:
        assert "opset" not in (error.hint or "")


def op_model(op: str, *, opset: int) -> onnx.ModelProto:
    model = relu_model(opset=opset)
    model.graph.node[0].op_type = op
    return model


@pytest.mark.parametrize(
    ("op", "opset", "message", "opset_advice"),
    [
        pytest.param(
            "Gelu",
            17,
            "The model uses the operator Gelu from domain ai.onnx, which ONNX defines from "
            "opset 20 on, but the model imports opset 17.",
            True,
            id="op-newer-than-the-opset",
        ),
        pytest.param(
            "NoSuchOp",
            17,
            "The model uses the operator NoSuchOp from domain ai.onnx, which ONNX does not "
            "define and no backend here implements.",
            False,
            id="op-onnx-never-defined",
        ),
    ],
)
def test_an_unknown_onnx_op_says_whether_the_opset_is_the_cause(
    tmp_path: Path, op: str, opset: int, message: str, opset_advice: bool
) -> None:
    error = refused(op_model(op, opset=opset), tmp_path / "m.onnx")

    assert error.message == message
    assert ("opset" in (error.hint or "")) is opset_advice


def test_an_op_onnx_removed_is_not_blamed_on_an_old_opset(tmp_path: Path) -> None:
    model = relu_model(opset=13)
    model.graph.node[0].op_type = "Upsample"
    model.graph.node[0].input.append("scales")
    model.graph.input.append(helper.make_tensor_value_info("scales", TensorProto.FLOAT, [1]))

    error = refused(model, tmp_path / "m.onnx")

    assert error.message == (
        "The model uses the operator Upsample from domain ai.onnx, which ONNX no longer defines "
        "at opset 13."
    )
    assert "opset" not in (error.hint or "")
