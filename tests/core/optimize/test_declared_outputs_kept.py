"""Every step of a recipe hands on the outputs its input declares, unless the pass is there to
change them (free-dims, dynamic batch), and the operator profile compares a variant with its
original by what the model makes.

AECMOS (torch 1.9, opset 9) ends in a Squeeze without axes of [batch_size, 2] and declares its
output [batch_size]; onnxslim's simplify (every AECMOS variant's first step) re-declared it
[batch_size, 2], and the profile refused every variant as "different models". The graphs here
end the same way.
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
from optistudio.core.errors import InvalidSpec
from optistudio.core.model.intake import inspect_model
from optistudio.core.optimize.making import run_recipe
from optistudio.core.optimize.recipes import Recipe, RecipeStep
from optistudio.core.passes.base import PassContext, passes


def squeezed_head(path: Path, *, batch: str | int = "batch_size", squeeze: bool = True) -> Path:
    """x [batch, 16] -> MatMul + bias -> [batch, 2] -> (Squeeze without axes, opset 9) ->
    Sigmoid; declared [batch] with the Squeeze, as torch traced it at batch 1, else [batch, 2]."""
    rng = np.random.default_rng(5)
    weights = [
        numpy_helper.from_array(rng.standard_normal((16, 2)).astype(np.float32) * 0.3, "w"),
        numpy_helper.from_array(np.array([0.1, -0.2], np.float32), "b"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"], name="dense"),
        helper.make_node("Add", ["mm", "b"], ["scores"], name="bias"),
    ]
    if squeeze:
        nodes.append(helper.make_node("Squeeze", ["scores"], ["squeezed"], name="squeeze"))
    nodes.append(helper.make_node("Sigmoid", [nodes[-1].output[0]], ["output"], name="sigmoid"))
    graph = helper.make_graph(
        nodes,
        "head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch] + [2] * (not squeeze))],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 6
    onnx.save(model, path)
    return path


def _outputs(model: Path) -> list[str]:
    return [signature(tensor) for tensor in inspect_model(model).outputs]


def _recipe(*steps: str) -> Recipe:
    return Recipe(name="r", label="r", steps=[RecipeStep(step=step) for step in steps])


def test_simplify_alone_re_declares_the_squeezed_output(tmp_path: Path) -> None:
    """What the recipe mends: onnxslim on its own declares the output [batch_size, 2]."""
    model = squeezed_head(tmp_path / "model.onnx")
    context = PassContext(work_dir=tmp_path / "work")

    made = passes.get("simplify").run(model, tmp_path / "slim.onnx", {}, context)

    assert _outputs(model) == ["output:float32:[?]"]
    assert _outputs(made.output) == ["output:float32:[?,2]"]


@pytest.mark.parametrize(
    "steps", [("simplify",), ("simplify", "ort_optimize"), ("simplify", "fp16")], ids="+".join
)
def test_every_step_keeps_the_declared_outputs(tmp_path: Path, steps: tuple[str, ...]) -> None:
    model = squeezed_head(tmp_path / "model.onnx")

    final, reports, _ = run_recipe(
        model, _recipe(*steps), tmp_path / "variant", PassContext(work_dir=tmp_path / "work")
    )

    assert _outputs(final) == _outputs(model)
    assert reports[0].details["declared_outputs_kept"] == 1
    np.testing.assert_allclose(  # the same model still, batch 1 and batch 3
        *[_run(path, 3) for path in (model, final)], rtol=2e-3, atol=1e-3
    )


def test_a_pass_there_to_change_the_outputs_hands_on_its_own(tmp_path: Path) -> None:
    """dynamic_batch frees the batch a file fixes at 1, on its outputs too: that stays."""
    model = squeezed_head(tmp_path / "model.onnx", batch=1, squeeze=False)

    final, reports, _ = run_recipe(
        model,
        _recipe("dynamic_batch", "simplify"),
        tmp_path / "variant",
        PassContext(work_dir=tmp_path / "work"),
    )

    assert _outputs(model) == ["output:float32:[1,2]"]
    assert _outputs(final) == ["output:float32:[?,2]"]
    assert "declared_outputs_kept" not in reports[0].details
    assert passes.get("free_dims").changes_outputs and not passes.get("simplify").changes_outputs


def test_the_profile_compares_a_simplified_variant_with_its_original(tmp_path: Path) -> None:
    model = squeezed_head(tmp_path / "model.onnx")
    final, _, _ = run_recipe(
        model, _recipe("simplify"), tmp_path / "variant", PassContext(work_dir=tmp_path / "w")
    )
    spec = OperatorProfileSpec(runs=2, warmup_runs=1)

    original = measure_operator_profile(model, spec, work_dir=tmp_path / "a")
    variant = measure_operator_profile(final, spec, work_dir=tmp_path / "b")
    comparison = compare_profiles(original, variant)

    assert (comparison.a_model, comparison.b_model) == ("model.onnx", "model.onnx")
    assert variant.outputs == original.outputs == ["output:float32:[?]"]


def test_the_profile_reads_an_output_re_declared_at_another_rank_as_the_same(
    tmp_path: Path,
) -> None:
    """A variant made before this fix (or by hand with onnxslim) still compares: its output
    has the original's name and element type; only its declared rank differs."""
    model = squeezed_head(tmp_path / "model.onnx")
    slim = passes.get("simplify").run(model, tmp_path / "slim.onnx", {}, PassContext(tmp_path))
    spec = OperatorProfileSpec(runs=2, warmup_runs=1)
    original = measure_operator_profile(model, spec, work_dir=tmp_path / "a")

    variant = measure_operator_profile(slim.output, spec, work_dir=tmp_path / "b")

    assert variant.outputs == ["output:float32:[?,2]"]
    assert compare_profiles(original, variant).b_model == "slim.onnx"


@pytest.mark.parametrize(
    "outputs",
    [["output:float32:[?,3]"], ["scores:float32:[?]"], ["output:float16:[?]"], []],
    ids=["other-fixed-dim", "other-name", "other-element-type", "no-output"],
)
def test_the_profile_still_refuses_another_model(tmp_path: Path, outputs: list[str]) -> None:
    model = squeezed_head(tmp_path / "model.onnx", squeeze=False)  # output [?, 2]
    spec = OperatorProfileSpec(runs=2, warmup_runs=1)
    original = measure_operator_profile(model, spec, work_dir=tmp_path / "a")

    with pytest.raises(InvalidSpec, match="are different models"):
        compare_profiles(original, original.model_copy(update={"outputs": outputs}))


def _run(path: Path, batch: int) -> np.ndarray:
    import onnxruntime as ort

    x = np.random.default_rng(0).standard_normal((batch, 16)).astype(np.float32)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"x": x})[0], np.float32)
