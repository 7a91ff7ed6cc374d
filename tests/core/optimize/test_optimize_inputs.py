"""The optimization run times its variants on the inputs the user gave or the data's shapes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from optistudio.core.data.datasets import NpzDataset
from optistudio.core.measure import compare
from optistudio.core.measure.compare import ComparisonSpec
from optistudio.core.model.intake import inspect_model
from optistudio.core.optimize.run import OptimizeSpec, optimize, timing_spec

QUICK = ComparisonSpec(min_pairs=4, min_seconds=0.05, max_seconds=2.0, warmup_runs=1, threads=1)


@pytest.fixture
def lines_model(tmp_path: Path) -> Path:
    """y = relu(x) on text-line images [batch, 3, height, width], every side dynamic."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "lines",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "lines.onnx")
    return tmp_path / "lines.onnx"


@pytest.fixture
def lines_data(lines_model: Path, tmp_path: Path) -> NpzDataset:
    np.savez(tmp_path / "lines.npz", x=np.ones((2, 3, 48, 320), np.float32))
    return NpzDataset(tmp_path / "lines.npz", inspect_model(lines_model).inputs)


def test_variants_are_timed_at_the_calibration_datas_shape(
    lines_model: Path, lines_data: NpzDataset, tmp_path: Path, monkeypatch
) -> None:
    timed_shapes = []
    real = compare.compare_loaded

    def spy(model_a, model_b, feeds_a, feeds_b, spec, **kwargs):
        timed_shapes.append(feeds_a["x"].shape)
        return real(model_a, model_b, feeds_a, feeds_b, spec, **kwargs)

    monkeypatch.setattr(compare, "compare_loaded", spy)
    spec = OptimizeSpec(recipes=["graph"], comparison=QUICK, target_backend="onnxruntime")

    report = optimize(lines_model, spec, out_dir=tmp_path / "out", data=lines_data)

    assert report.variants[0].error is None
    assert timed_shapes == [(1, 3, 48, 320)]


def test_given_shapes_and_values_win_over_the_datas(
    lines_model: Path, lines_data: NpzDataset
) -> None:
    spec = OptimizeSpec(shapes={"x": [2, 3, 32, 96]}, values={"x": 0.5}, comparison=QUICK)

    timing = timing_spec(spec, inspect_model(lines_model), lines_data)

    assert (timing.shapes, timing.values, timing.dims) == ({"x": [2, 3, 32, 96]}, {"x": 0.5}, {})


def test_without_data_or_shapes_the_timing_is_the_comparisons_own(lines_model: Path) -> None:
    spec = OptimizeSpec(comparison=QUICK)

    assert timing_spec(spec, inspect_model(lines_model), None) == QUICK
