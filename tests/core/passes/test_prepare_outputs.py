"""An INT8 variant declares the outputs its original declares.

AECMOS (torch 1.9, opset 9) ends in a Squeeze without axes of [batch_size, 2] and declares its
output [batch_size]; at batch 1 it returns [2]. ONNX Runtime's pre-processing (symbolic shape
inference, which takes a symbolic dim never to be 1) re-declared the output [batch_size, 2], so
the operator profile refused the job's own INT8 variant as "different models". The graph here
ends the same way.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.diagnose.operator_profile import (
    OperatorProfileSpec,
    measure_operator_profile,
    signature,
)
from optistudio.core.diagnose.profile_compare import compare_profiles
from optistudio.core.model.intake import inspect_model
from optistudio.core.passes.base import PassContext
from optistudio.core.passes.prepare import keep_declared_outputs, prepare_for_quantizer
from optistudio.core.passes.quantize import (
    Int8DynamicConfig,
    Int8StaticConfig,
    run_int8_dynamic,
    run_int8_static,
)
from tests.core.passes.exporter_graphs import Batches


def squeezed_scores(path: Path) -> Path:
    """x [batch_size, 16] -> MatMul + bias -> [batch_size, 2] -> Squeeze (no axes, opset 9)
    -> Sigmoid, declared [batch_size] as the exporter wrote it."""
    rng = np.random.default_rng(3)
    weights = [
        numpy_helper.from_array(rng.standard_normal((16, 2)).astype(np.float32) * 0.3, "w"),
        numpy_helper.from_array(np.array([0.1, -0.2], np.float32), "b"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"], name="dense"),
        helper.make_node("Add", ["mm", "b"], ["scores"], name="bias"),
        helper.make_node("Squeeze", ["scores"], ["squeezed"], name="squeeze"),
        helper.make_node("Sigmoid", ["squeezed"], ["output"], name="sigmoid"),
    ]
    graph = helper.make_graph(
        nodes,
        "squeezed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch_size", 16])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch_size"])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 6
    onnx.save(model, path)
    return path


def _outputs(model: Path) -> list[str]:
    return [signature(tensor) for tensor in inspect_model(model).outputs]


def test_pre_processing_keeps_the_declared_output(tmp_path: Path) -> None:
    model = squeezed_scores(tmp_path / "model.onnx")

    prepared = prepare_for_quantizer(model, tmp_path / "work")

    assert prepared.path != model  # pre-processed, not left as it was
    assert _outputs(prepared.path) == ["output:float32:[?]"]


@pytest.mark.parametrize("kind", ["static", "dynamic"])
def test_an_int8_variant_is_profiled_beside_its_original(tmp_path: Path, kind: str) -> None:
    model = squeezed_scores(tmp_path / "model.onnx")
    out = tmp_path / f"{kind}.onnx"
    context = PassContext(work_dir=tmp_path / "work", calibration=Batches({"x": (1, 16)}))
    if kind == "static":
        run_int8_static(model, out, Int8StaticConfig(), context)
    else:
        run_int8_dynamic(model, out, Int8DynamicConfig(), context)
    spec = OperatorProfileSpec(runs=2, warmup_runs=1)

    original = measure_operator_profile(model, spec, work_dir=tmp_path / "a")
    variant = measure_operator_profile(out, spec, work_dir=tmp_path / "b")

    assert _outputs(out) == _outputs(model)
    assert compare_profiles(original, variant).b_model == out.name


def test_an_output_the_original_leaves_unshaped_stays_unshaped(tmp_path: Path) -> None:
    source = squeezed_scores(tmp_path / "model.onnx")
    proto = onnx.load(source)
    proto.graph.output[0].type.tensor_type.ClearField("shape")
    onnx.save(proto, source)
    target = tmp_path / "target.onnx"
    onnx.save(onnx.shape_inference.infer_shapes(proto), target)
    proto_target = onnx.load(target)
    proto_target.graph.output[0].type.tensor_type.shape.dim.add().dim_value = 2
    onnx.save(proto_target, target)

    changed = keep_declared_outputs(source, target)

    assert changed == 1
    assert not onnx.load(target).graph.output[0].type.tensor_type.HasField("shape")
    assert keep_declared_outputs(source, target) == 0  # already as declared
