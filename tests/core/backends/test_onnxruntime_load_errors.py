"""ONNX Runtime's load failures as advice that follows the cause, never the server's path."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from optistudio.core.backends import SessionOptions, get_backend
from optistudio.core.backends.loadable import load_refusal
from optistudio.core.errors import ModelLoadError


def one_node(op: str, *, domain: str = "", opset: int = 17) -> onnx.ModelProto:
    imports = [helper.make_opsetid("", opset)] + (
        [helper.make_opsetid(domain, 1)] if domain else []
    )
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], domain=domain)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 8
    return model


def load_error(path: Path) -> ModelLoadError:
    with pytest.raises(ModelLoadError) as caught:
        get_backend("onnxruntime").load(path, SessionOptions())
    return caught.value


def write(path: Path, content: onnx.ModelProto | bytes) -> None:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        onnx.save(content, path)


@pytest.mark.parametrize(
    ("content", "says", "advice", "opset_advice"),
    [
        pytest.param(
            one_node("Foo", domain="com.acme"),
            "uses the operator Foo from domain com.acme",
            "needs a runtime that implements com.acme",
            False,
            id="custom-op",
        ),
        pytest.param(
            one_node("Frobnicate"),
            "operator Frobnicate from domain ai.onnx, which ONNX does not define",
            "standard operators",
            False,
            id="unknown-onnx-op",
        ),
        pytest.param(
            b"not a model" * 20, "not an ONNX model", "file is complete", False, id="bad-file"
        ),
        pytest.param(
            one_node("Relu", opset=40),
            "uses opset 40 of domain ai.onnx, newer than this ONNX Runtime supports",
            "opset",
            True,
            id="too-new-opset",
        ),
    ],
)
def test_the_advice_follows_the_cause(
    tmp_path: Path, content: onnx.ModelProto | bytes, says: str, advice: str, opset_advice: bool
) -> None:
    path = tmp_path / "server" / "uploads" / "m.onnx"
    path.parent.mkdir(parents=True)
    write(path, content)

    error = load_error(path)

    assert error.message.startswith("ONNX Runtime could not load this model: ")
    assert says in error.message and advice in (error.hint or "")
    assert ("opset" in (error.hint or "")) is opset_advice
    assert str(tmp_path) not in f"{error.message} {error.hint}"


def test_another_failure_keeps_its_first_line_without_path_or_source_location(
    tmp_path: Path,
) -> None:
    path = tmp_path / "server" / "m.onnx"
    message = (
        f"[ONNXRuntimeError] : 1 : FAIL : Load model from {path} failed:External data path "
        "validation failed for initializer: w. Error: tensorprotoutils.cc:619 "
        'ValidateExternalDataPathFromDir External data path does not exist: "m.data"'
    )

    error = load_refusal(message, path)

    assert error.message == (
        "ONNX Runtime could not load the model: External data path validation failed for "
        'initializer: w. Error: External data path does not exist: "m.data"'
    )
    assert "opset" not in (error.hint or "")
