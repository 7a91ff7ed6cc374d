"""int8_nncf_ov_careful: NNCF's INT8 on the OpenVINO model with asymmetric activations (the
mixed preset), NNCF's exact bias correction and activation ranges that clip no calibration
sample, a choice of calibration by name; Auto adds it only after NNCF's defaults missed
(tests.core.optimize.test_accuracy_offer), not among its first candidates."""

from __future__ import annotations

from pathlib import Path

from optistudio.core.optimize.recipes import BUILTIN_RECIPES, get_recipe
from optistudio.core.optimize.run import OptimizeSpec, _make_all, _run_recipes
from optistudio.core.progress import ignore_progress
from tests.core.optimize.test_accuracy_offer import _making

CAREFUL = {"preset": "mixed", "fast_bias_correction": False, "activation_ranges": "global"}


def test_it_resolves_by_name_with_its_bf16_twin_and_auto_leaves_it_out(tmp_path: Path) -> None:
    recipe, twin = get_recipe("int8_nncf_ov_careful"), get_recipe("int8_nncf_ov_careful_bf16")

    assert [(s.step, s.config) for s in recipe.steps] == [("int8_nncf_ov", CAREFUL)]
    assert twin.steps == recipe.steps
    assert (recipe.backend, recipe.precision, twin.precision) == ("openvino", None, "bf16")
    auto_spec = OptimizeSpec(recipes=["auto"], target_backend="any")
    auto = {r.name for r in _run_recipes(auto_spec, _making(tmp_path).info)}
    assert any(r.startswith("int8_nncf_ov") for r in auto)
    assert not [r for r in auto if "careful" in r]
    assert "int8_nncf_ov_careful" in BUILTIN_RECIPES


def test_a_named_run_quantizes_with_the_careful_options_and_judges_it(tmp_path: Path) -> None:
    made = _making(tmp_path)
    spec = OptimizeSpec(recipes=["int8_nncf_ov_careful"], target_backend="openvino")
    recipes = _run_recipes(spec, made.info)

    (variant,) = _make_all(made, spec, recipes, ignore_progress)

    assert (variant.status, variant.backend, variant.precision) == ("made", "openvino", "int8")
    assert variant.path is not None and variant.path.endswith(".xml"), variant.error
    assert variant.judged and variant.verdict is not None
    (step,) = variant.steps
    assert step.details["preset"] == "mixed" and step.details["fast_bias_correction"] is False
    assert step.details["activation_ranges"] == "global"
