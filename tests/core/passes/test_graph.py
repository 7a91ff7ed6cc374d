"""ONNX Runtime's offline optimization writes its own operators; the pass checks its output the
way ONNX Runtime meets it (by loading it there), and the variant is made, not blamed on the
model."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from optimize_models import layer_norm_model, rms_norm_model

from optistudio.core.errors import PassFailed
from optistudio.core.measure.compare import ComparisonSpec
from optistudio.core.model.intake import inspect_model
from optistudio.core.optimize.run import OptimizeSpec, optimize
from optistudio.core.passes import graph
from optistudio.core.passes.base import PassContext, PassReport, passes

FUSED = [
    pytest.param(rms_norm_model, "SimplifiedLayerNormalization", id="rmsnorm"),
    pytest.param(layer_norm_model, "LayerNormalization", id="layernorm-opset13"),
]


def ort_optimize(model: Path, out: Path, level: str = "extended") -> PassReport:
    context = PassContext(work_dir=out.parent)
    return passes.get("ort_optimize").run(model, out, {"level": level}, context)


@pytest.mark.parametrize(("build", "fused_op"), FUSED)
@pytest.mark.parametrize("level", ["extended", "all"])
def test_runtime_ops_in_the_output_are_checked_by_loading_it(
    tmp_path: Path, build, fused_op: str, level: str
) -> None:
    out = tmp_path / "optimized.onnx"

    report = ort_optimize(build(tmp_path / "model.onnx"), out, level)

    assert [node.op_type for node in onnx.load(out).graph.node] == [fused_op]
    with pytest.raises(onnx.checker.ValidationError, match=f"No Op registered for {fused_op}"):
        onnx.checker.check_model(str(out))  # what used to reject the variant
    assert report.details["runtime_ops"] == [fused_op]
    assert report.warnings == [
        f"The optimized graph uses ONNX Runtime's own operators ({fused_op}): "
        "it runs on ONNX Runtime only."
    ]
    assert inspect_model(out).node_count == 1


def test_a_standard_output_has_no_runtime_ops_and_no_warning(tmp_path: Path) -> None:
    report = ort_optimize(rms_norm_model(tmp_path / "model.onnx"), tmp_path / "o.onnx", "basic")

    assert report.details["runtime_ops"] == [] and report.warnings == []


def test_an_output_that_does_not_load_back_is_the_passes_failure(tmp_path, monkeypatch) -> None:
    real = graph.reference_session

    def optimizes_then_fails(model: Path, **options: object) -> object:
        if "optimized_model" in options:
            return real(model, **options)
        raise RuntimeError("[ONNXRuntimeError] : 1 : FAIL : broken graph\nmore lines")

    monkeypatch.setattr(graph, "reference_session", optimizes_then_fails)

    with pytest.raises(PassFailed) as caught:
        ort_optimize(rms_norm_model(tmp_path / "model.onnx"), tmp_path / "o.onnx")

    error = caught.value
    assert error.message == (
        "ONNX Runtime could not load back the graph it optimized at level 'extended': "
        "[ONNXRuntimeError] : 1 : FAIL : broken graph"
    )
    assert "not your model" in error.hint and "export" not in error.hint.lower()


def test_the_graph_recipe_makes_a_variant_of_a_model_it_fuses(tmp_path: Path) -> None:
    spec = OptimizeSpec(
        recipes=["graph"],
        comparison=ComparisonSpec(min_pairs=10, min_seconds=0.1, max_seconds=1.0, threads=1),
        accuracy_samples=4,
    )

    report = optimize(rms_norm_model(tmp_path / "model.onnx"), spec, out_dir=tmp_path / "out")

    [variant] = report.variants
    assert variant.status == "made", variant.error
    assert variant.steps[-1].details["runtime_ops"] == ["SimplifiedLayerNormalization"]
    assert variant.accuracy.mean_cosine == pytest.approx(1.0, abs=1e-5)
    assert variant.speedup is not None
