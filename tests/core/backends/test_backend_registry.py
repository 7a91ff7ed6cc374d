from __future__ import annotations

import pytest

from optistudio.core.backends import backends, get_backend
from optistudio.core.errors import UnknownName


def test_onnxruntime_is_registered_through_entry_points() -> None:
    spec = backends.get("onnxruntime")

    assert spec.label == "ONNX Runtime"
    assert "cpu" in spec.devices
    assert get_backend("onnxruntime").availability().ok


def test_unknown_backend_lists_valid_names() -> None:
    with pytest.raises(UnknownName) as caught:
        backends.get("tensorflow")

    assert "onnxruntime" in caught.value.message
    assert "'tensorflow'" in caught.value.message


def test_unloadable_model_is_a_load_error(tmp_path) -> None:
    import onnx
    from onnx import TensorProto, helper

    from optistudio.core.backends import SessionOptions
    from optistudio.core.errors import ModelLoadError

    node = helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.example")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    )
    path = tmp_path / "bad.onnx"
    onnx.save(model, path)

    with pytest.raises(ModelLoadError, match="ONNX Runtime could not load"):
        get_backend("onnxruntime").load(path, SessionOptions())


def test_a_run_that_fails_is_an_inference_error_naming_the_shapes(tiny_model) -> None:
    import numpy as np

    from optistudio.core.backends import SessionOptions
    from optistudio.core.errors import InferenceFailed

    model = get_backend("onnxruntime").load(tiny_model, SessionOptions())

    with pytest.raises(InferenceFailed, match=r"inputs x=\[2, 5\]"):
        model.run({"x": np.zeros((2, 5), dtype=np.float32)})


def test_a_plain_cpu_pick_stays_on_onnx_runtime_whatever_else_is_installed(monkeypatch) -> None:
    from optistudio.core.backends.base import BackendSpec
    from optistudio.core.backends.predictor import pick_backend

    # A backend that sorts first by name and runs on the CPU here (as LiteRT does once its
    # extra is installed) must not take over `InferenceBackend.create("cpu")`.
    first_by_name = backends.get("onnxruntime").model_copy(update={"name": "aardvark"})
    assert isinstance(first_by_name, BackendSpec)
    monkeypatch.setitem(backends._entries, "aardvark", first_by_name)

    assert next(iter(backends)).name == "aardvark"
    assert pick_backend("cpu") == "onnxruntime"
