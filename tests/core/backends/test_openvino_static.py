"""OpenVINO compiles a graph whose dynamic form it refuses at the shapes each run feeds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.backends import SessionOptions, get_backend
from optistudio.core.backends.openvino_static import ReshapedOpenVinoModel

ov = pytest.importorskip("openvino")


def dynamic_rank_squeeze(path: Path) -> Path:
    """x [N, 16] -> MatMul [16, 1] -> Squeeze with no axes: the output's rank depends on N."""
    weight = np.linspace(-1.0, 1.0, 16, dtype=np.float32).reshape(16, 1)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"], name="score"),
            helper.make_node("Squeeze", ["m"], ["y"], name="squeeze"),
        ],
        "scalar_head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def test_openvino_refuses_the_dynamic_graph_itself(tmp_path: Path) -> None:
    path = dynamic_rank_squeeze(tmp_path / "squeeze.onnx")
    with pytest.raises(Exception, match="dynamic rank"):
        ov.Core().compile_model(ov.convert_model(str(path)), "CPU")


def test_the_backend_compiles_it_at_each_runs_shapes(tmp_path: Path) -> None:
    path = dynamic_rank_squeeze(tmp_path / "squeeze.onnx")
    reference = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    loaded = get_backend("openvino").load(path, SessionOptions(threads=1))
    try:
        assert isinstance(loaded, ReshapedOpenVinoModel)
        assert "dynamic rank" in loaded.details["dynamic_shapes"]
        for batch in (1, 3):
            x = np.random.default_rng(batch).standard_normal((batch, 16)).astype(np.float32)
            (got,) = loaded.run({"x": x})
            (want,) = reference.run(None, {"x": x})
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        assert "x=[3, 16]" in loaded.details["dynamic_shapes"]
        assert loaded.details["requested_precision"] == "fp32"
    finally:
        loaded.close()
