"""A recipe that does not fit the model is listed as not applicable, never as a failure.

Models built in code: a scalar head whose Squeeze has no axes (dynamic rank: OpenVINO's CPU plugin
refuses it until the model is reshaped to the run's shapes), a graph with an ai.onnx.ml op no
OpenVINO frontend converts, and tf2onnx's NHWC convolution whose weight sits behind a Transpose.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.errors import ErrorCode, ErrorInfo
from optistudio.core.measure.compare import ComparisonSpec
from optistudio.core.optimize.headline import headline, not_applicable_note
from optistudio.core.optimize.recipes import BUILTIN_RECIPES
from optistudio.core.optimize.run import OptimizeSpec, VariantResult, optimize, set_outcome
from optistudio.core.passes.prepare import GraphNotApplicable, finish_quantized
from tests.core.passes.exporter_graphs import (
    already_qdq,
    custom_op_model,
    dynamic_rank_squeeze,
    tf2onnx_nhwc_conv,
)

pytest.importorskip("openvino")

QUICK = ComparisonSpec(min_pairs=20, min_seconds=0.2, max_seconds=3.0, threads=1)


def scaler_head(path: Path) -> Path:
    """x [N, 8] -> MatMul -> ai.onnx.ml Scaler: ONNX Runtime runs it, OpenVINO cannot convert."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="dense"),
        helper.make_node(
            "Scaler", ["m"], ["y"], domain="ai.onnx.ml", offset=[0.5] * 8, scale=[2.0] * 8
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "scaled",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
        [numpy_helper.from_array(np.eye(8, dtype=np.float32), "w")],
    )
    opsets = [helper.make_opsetid("", 13), helper.make_opsetid("ai.onnx.ml", 3)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_a_dynamic_rank_squeeze_runs_on_openvino_at_the_runs_shapes(tmp_path: Path) -> None:
    model = dynamic_rank_squeeze(tmp_path / "squeeze.onnx")
    spec = OptimizeSpec(
        recipes=["fp32"],
        target_backend="openvino",
        comparison=QUICK,
        accuracy_samples=4,
        shapes={"x": [1, 16]},
    )

    report = optimize(model, spec, out_dir=tmp_path / "out")

    [variant] = report.variants
    assert variant.status == "made", variant.error
    assert variant.backend == "openvino"
    assert variant.accuracy.mean_cosine == pytest.approx(1.0, abs=1e-4)
    assert variant.speedup is not None
    assert report.failed == [] and report.not_applicable == []


def test_a_variant_its_backend_cannot_load_is_not_applicable_not_failed(tmp_path: Path) -> None:
    model = scaler_head(tmp_path / "scaler.onnx")
    spec = OptimizeSpec(recipes=["fp32"], target_backend="openvino", comparison=QUICK)

    report = optimize(model, spec, out_dir=tmp_path / "out")

    [variant] = report.variants
    assert variant.status == "not_applicable"
    assert variant.path is None
    assert variant.error.code == ErrorCode.model_load_failed
    assert "Scaler" in variant.error.message
    assert variant.why_not_applicable().startswith("not applicable on openvino: OpenVINO could")
    assert report.failed == [] and report.not_applicable == [variant]
    assert report.headline == (
        "No variant could be made: 1 not applicable to this model or backend."
    )
    assert any(note.startswith("Not applicable here") for note in report.notes)


@pytest.mark.parametrize("build", ["tf2onnx", "already_qdq"])
def test_exporter_graphs_make_int8_variants_that_load(tmp_path: Path, build: str) -> None:
    builders = {"tf2onnx": tf2onnx_nhwc_conv, "already_qdq": already_qdq}
    model, shapes = builders[build](tmp_path / f"{build}.onnx")
    spec = OptimizeSpec(
        recipes=["int8_dynamic", "int8_static"],
        comparison=QUICK,
        accuracy_samples=4,
        shapes={name: list(shape) for name, shape in shapes.items()},
    )

    report = optimize(model, spec, out_dir=tmp_path / "out")

    assert [v.status for v in report.variants] == ["made", "made"], [
        v.error for v in report.variants
    ]
    assert all(v.accuracy.mean_cosine > 0.95 for v in report.variants)


def test_a_graph_the_quantizer_cannot_take_sets_the_recipe_aside(tmp_path: Path) -> None:
    """What the run does with GraphNotApplicable (here: a quantized graph ONNX Runtime cannot
    load): the variant is not applicable to this graph, with ONNX Runtime's sentence."""
    unloadable = custom_op_model(tmp_path / "out.onnx")
    variant = VariantResult(recipe=BUILTIN_RECIPES["int8_static"], precision="int8")
    with pytest.raises(GraphNotApplicable) as caught:
        finish_quantized(unloadable, "static INT8")

    set_outcome(variant, caught.value)

    assert variant.status == "not_applicable"
    assert variant.not_applicable_where() == "to this graph"
    assert variant.why_not_applicable().startswith(
        "not applicable to this graph: static INT8 made a model ONNX Runtime cannot load: "
    )


def _variant(name: str, status: str, code: ErrorCode | None = None) -> VariantResult:
    error = (
        ErrorInfo(code=code, message="Not applicable to this graph: it cannot") if code else None
    )
    return VariantResult(recipe=BUILTIN_RECIPES[name], precision="int8", status=status, error=error)


def test_not_applicable_variants_are_counted_apart_from_failures() -> None:
    variants = [
        _variant("int8_dynamic", "not_applicable", ErrorCode.pass_failed),
        _variant("int8_static", "failed", ErrorCode.pass_failed),
    ]

    said = headline(variants, None)
    note = not_applicable_note(variants)

    assert said == (
        "No variant could be made: 1 recipe(s) failed, 1 not applicable to this model or backend."
    )
    assert note == (
        "Not applicable here (not failures; each says why): INT8 dynamic (to this graph)."
    )
    assert variants[0].why_not_applicable() == "not applicable to this graph: it cannot"
    stored = VariantResult.model_validate(variants[0].model_dump(mode="json"))
    assert stored.status == "not_applicable"
