"""Whether Auto adds its pick fixed at the run's input shapes (the ov_static step after it).

OpenVINO's CPU plugin runs a graph compiled at static shapes faster than the same graph with
dynamic dims (optistudio.core.passes.ov_static). Auto's candidates on OpenVINO keep the file's
dims as `ov.convert_model` does; once the run has a pick, and the pick runs on OpenVINO and the
model has a dynamic input dim, Auto makes the pick's file fixed at the run's shapes (no second
quantization: the step runs on the pick's own file), and judges and times it as any variant. It
is chosen only when it is faster by the run's own rule.
"""

from __future__ import annotations

from collections.abc import Sequence

from optistudio.core.model.info import ModelInfo
from optistudio.core.optimize.recipes import OPENVINO, Recipe, RecipeStep
from optistudio.core.optimize.variant import VariantResult

STATIC_PASS = "ov_static"
STATIC_SUFFIX = "_static"
OPENVINO_FILES = (".onnx", ".xml")


def offer_static_shapes(
    pick: VariantResult | None, variants: Sequence[VariantResult], info: ModelInfo
) -> Recipe | None:
    """The pick's recipe with the static-shapes step after it, when the pick runs on OpenVINO
    from an ONNX or IR file, the model has a dynamic input dim and no variant is fixed yet."""
    if pick is None or pick.backend != OPENVINO or pick.path is None:
        return None
    if not pick.path.endswith(OPENVINO_FILES) or not any(i.dynamic_dims for i in info.inputs):
        return None
    if any(STATIC_PASS in _steps(v) for v in variants):
        return None
    return static_recipe(pick.recipe)


def static_recipe(recipe: Recipe) -> Recipe:
    """`recipe` with the static-shapes step last: 'bf16@openvino' -> 'bf16_static@openvino'."""
    base, at, backend = recipe.name.partition("@")
    return recipe.model_copy(
        update={
            "name": f"{base}{STATIC_SUFFIX}{at}{backend}",
            "label": f"{recipe.label}, static shapes",
            "steps": [*recipe.steps, RecipeStep(step=STATIC_PASS)],
        }
    )


def _steps(variant: VariantResult) -> list[str]:
    return [step.step for step in variant.recipe.steps]
