"""OpenVINO compiles a graph whose dynamic form it refuses at the shapes each run feeds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from optistudio.core.backends import SessionOptions, get_backend
from optistudio.core.backends.openvino_static import ReshapedOpenVinoModel
from tests.core.passes.exporter_graphs import dynamic_rank_squeeze

ov = pytest.importorskip("openvino")


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
