"""A variant whose shape inference fixed a dim the export left dynamic is the same model."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

from optistudio.core.diagnose.operator_profile import OperatorProfileSpec, measure_operator_profile
from optistudio.core.diagnose.profile_compare import compare_profiles


def _model(path: Path, output_shape: list[int | str]) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, output_shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_a_refined_output_shape_still_compares(tmp_path: Path) -> None:
    spec = OperatorProfileSpec(runs=2, warmup_runs=1)
    a = measure_operator_profile(
        _model(tmp_path / "a.onnx", ["batch", "n"]), spec, work_dir=tmp_path / "a"
    )
    b = measure_operator_profile(
        _model(tmp_path / "b.onnx", ["batch", 4]), spec, work_dir=tmp_path / "b"
    )

    comparison = compare_profiles(a, b)

    assert comparison.a_ms > 0 and comparison.b_ms > 0
