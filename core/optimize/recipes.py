"""Named recipes (ordered pass lists) and the Auto choice of candidates for a model."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.errors import UnknownName
from optistudio.core.machine.environment import int8_choice, isa_flags
from optistudio.core.model.info import QUANTIZED_OPS, ModelInfo


class RecipeStep(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: str = Field(description="Registered pass name, e.g. 'int8_static'.")
    config: dict[str, Any] = Field(default_factory=dict, description="The pass's config.")


class Recipe(BaseModel):
    """An ordered list of passes; enough to reproduce a variant from its original."""

    model_config = ConfigDict(extra="forbid")

    name: str
    label: str
    steps: list[RecipeStep]
    backend: str | None = Field(
        default=None,
        description="Backend the variant is made for and timed on; empty = the run's target.",
    )


def _recipe(name: str, label: str, *steps: tuple[str, dict[str, Any]]) -> Recipe:
    return Recipe(name=name, label=label, steps=[RecipeStep(step=s, config=c) for s, c in steps])


BUILTIN_RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        _recipe("fp32", "FP32 as it is"),
        _recipe("graph", "Graph optimization", ("simplify", {}), ("ort_optimize", {})),
        _recipe("fusion", "Operator fusion", ("simplify", {}), ("fusion", {})),
        _recipe("fp16", "FP16", ("simplify", {}), ("fp16", {})),
        _recipe("int8_dynamic", "INT8 dynamic", ("simplify", {}), ("int8_dynamic", {})),
        _recipe(
            "int8_static",
            "INT8 static (MinMax)",
            ("simplify", {}),
            ("int8_static", {"calibration": "minmax"}),
        ),
        _recipe(
            "int8_static_entropy",
            "INT8 static (Entropy)",
            ("simplify", {}),
            ("int8_static", {"calibration": "entropy"}),
        ),
        _recipe(
            "int8_static_percentile",
            "INT8 static (Percentile)",
            ("simplify", {}),
            ("int8_static", {"calibration": "percentile"}),
        ),
        _recipe(
            "int8_mixed",
            "INT8 mixed precision (accuracy-aware)",
            ("simplify", {}),
            ("int8_mixed", {}),
        ),
        _recipe(
            "int8_static_mse",
            "INT8 static (MSE)",
            ("simplify", {}),
            ("int8_static", {"calibration": "mse"}),
        ),
        _recipe("int8_nncf", "INT8 NNCF (for OpenVINO)", ("simplify", {}), ("int8_nncf", {})),
        _recipe(
            "int8_nncf_transformer",
            "INT8 NNCF transformer (for OpenVINO)",
            ("simplify", {}),
            ("int8_nncf", {"model_type": "transformer"}),
        ),
        _recipe(
            "qat",
            "INT8 quantization-aware training",
            ("simplify", {}),
            ("qat", {}),
        ),
    )
}
# The LiteRT conversions: their variants are .tflite files, timed on litert whatever the target.
BUILTIN_RECIPES |= {
    r.name: r.model_copy(update={"backend": "litert"})
    for r in (
        _recipe("litert_fp32", "LiteRT FP32", ("simplify", {}), ("litert_fp32", {})),
        _recipe("litert_fp16", "LiteRT FP16 weights", ("simplify", {}), ("litert_fp16", {})),
        _recipe(
            "litert_int8_dynamic",
            "LiteRT INT8 dynamic range",
            ("simplify", {}),
            ("litert_int8_dynamic", {}),
        ),
        _recipe("litert_int8", "LiteRT full-integer INT8", ("simplify", {}), ("litert_int8", {})),
    )
}
ANY = "any"
"""Target meaning every backend available on the device: Auto then chooses the backend too."""
REFERENCE_BACKEND = "onnxruntime"
NNCF_RECIPES = {"int8_nncf", "int8_nncf_transformer"}
LITERT = "litert"

AUTO = "auto"
CPU_RANGED_PASSES = ("int8_dynamic", "int8_static", "int8_mixed", "qat")
"""INT8 passes on ONNX Runtime's quantizer whose weight range follows the CPU (reduce_range)."""


def get_recipe(name: str) -> Recipe:
    try:
        return BUILTIN_RECIPES[name]
    except KeyError:
        valid = ", ".join([AUTO, *BUILTIN_RECIPES])
        raise UnknownName(f"Unknown recipe {name!r}. Valid recipes: {valid}.") from None


def auto_candidates(info: ModelInfo, *, target_backend: str = "onnxruntime") -> list[Recipe]:
    """The sensible candidates for this model on a CPU.

    CNNs (Conv-heavy): fusion and static INT8 (dynamic INT8 quantizes activations at run time,
    which makes convolutions slower on CPUs), plus NNCF's INT8 when the target is OpenVINO
    (its quantizer placement follows OpenVINO's fusions). Transformers / MLPs (MatMul-heavy):
    dynamic INT8. FP16 only when the CPU computes in FP16 natively; elsewhere ONNX Runtime
    emulates it slowly. A model that is already INT8 (QDQ, QLinear ops) is not quantized again.
    """
    ops = info.op_histogram
    convs = ops.get("Conv", 0) + ops.get("ConvTranspose", 0)
    matmuls = ops.get("MatMul", 0) + ops.get("Gemm", 0)
    if target_backend == LITERT:
        return litert_candidates(info)
    names = ["graph"]
    if convs:
        names += ["fusion", "int8_static", "int8_static_percentile"]
        if target_backend == "openvino":
            names += ["int8_nncf"]
    if matmuls > convs:
        names += ["int8_dynamic"]
        if target_backend == "openvino":
            names += ["int8_nncf_transformer"]
    if {"avx512_fp16", "amx_fp16"} & set(isa_flags()):
        names += ["fp16"]
    return [BUILTIN_RECIPES[name] for name in names if not _requantizes(info, name)]


def litert_candidates(info: ModelInfo) -> list[Recipe]:
    """Target litert: the .tflite conversions. FP32 always; full-integer INT8 for CNNs (it
    needs calibration data); dynamic-range INT8 for MatMul-heavy models; FP16 weights only
    where they can pay off (a CPU computing FP16; elsewhere XNNPACK widens them to FP32)."""
    ops = info.op_histogram
    convs = ops.get("Conv", 0) + ops.get("ConvTranspose", 0)
    matmuls = ops.get("MatMul", 0) + ops.get("Gemm", 0)
    names = ["litert_fp32"]
    names += ["litert_int8"] if convs else []
    names += ["litert_int8_dynamic"] if matmuls > convs else []
    names += ["litert_fp16"] if {"avx512_fp16", "amx_fp16"} & set(isa_flags()) else []
    return [BUILTIN_RECIPES[name] for name in names if not _requantizes(info, name)]


def _requantizes(info: ModelInfo, name: str) -> bool:
    """Whether recipe `name` would quantize a model that is INT8 already (quantize_static
    on a QDQ model writes a graph the checker refuses; NNCF's only slows it down)."""
    quantizes = name.startswith("int8") or name.startswith("litert_int8")
    return quantizes and bool(QUANTIZED_OPS & info.op_histogram.keys())


def any_backend_candidates(info: ModelInfo, backends: list[str]) -> list[Recipe]:
    """Auto across backends: ONNX Runtime's candidates, and on every other backend the model
    as it is plus that backend's own INT8 (NNCF for OpenVINO: CNN or transformer flavour).

    Graph rewrites and dynamic INT8 are left out for OpenVINO: it fuses on its own, and dynamic
    INT8 ran at 0.78x of FP32 there on MiniLM (docs/BENCHMARKS.md).
    """
    ops = info.op_histogram
    convs = ops.get("Conv", 0) + ops.get("ConvTranspose", 0)
    matmuls = ops.get("MatMul", 0) + ops.get("Gemm", 0)
    found = [on_backend(r, REFERENCE_BACKEND) for r in auto_candidates(info)]
    for backend in backends:
        if backend in (REFERENCE_BACKEND, LITERT):  # LiteRT converts for minutes: --target litert
            continue
        names = ["fp32"]
        if backend == "openvino":
            names += ["int8_nncf"] if convs else []
            names += ["int8_nncf_transformer"] if matmuls > convs else []
        found += [
            on_backend(BUILTIN_RECIPES[name], backend)
            for name in names
            if not _requantizes(info, name)
        ]
    return found


def on_backend(recipe: Recipe, backend: str) -> Recipe:
    """The recipe pinned to a backend; off the reference its name says where
    ('int8_nncf@openvino'), on ONNX Runtime it keeps its plain name ('int8_static')."""
    if backend == REFERENCE_BACKEND:
        return recipe.model_copy(update={"backend": backend})
    return recipe.model_copy(
        update={
            "name": f"{recipe.name}@{backend}",
            "label": f"{recipe.label} on {backend}",
            "backend": backend,
        }
    )


def resolve_recipes(
    names: list[str],
    info: ModelInfo,
    *,
    target_backend: str = "onnxruntime",
    backends: list[str] | None = None,
) -> list[Recipe]:
    """Recipe names (or 'auto') to recipes, without duplicates, in the order given.

    With target 'any', `backends` are those available on the device: Auto spreads over them
    (any_backend_candidates) and a named recipe is pinned to ONNX Runtime, or to OpenVINO for
    the NNCF recipes.
    """
    chosen: dict[str, Recipe] = {}
    for name in names:
        if target_backend == ANY:
            found = _on_any(name, info, backends or [REFERENCE_BACKEND])
        elif name == AUTO:
            found = auto_candidates(info, target_backend=target_backend)
        else:
            found = [get_recipe(name)]
        for recipe in found:
            chosen.setdefault(recipe.name, recipe)
    return list(chosen.values())


def _on_any(name: str, info: ModelInfo, backends: list[str]) -> list[Recipe]:
    if name == AUTO:
        return any_backend_candidates(info, backends)
    recipe = get_recipe(name)
    backend = recipe.backend or ("openvino" if name in NNCF_RECIPES else REFERENCE_BACKEND)
    if backend not in backends:
        raise UnknownName(
            f"Recipe {name!r} needs {backend}, which is not available here. "
            f"Available backends: {', '.join(backends)}."
        )
    return [on_backend(recipe, backend)]


def int8_notes(recipes: list[Recipe], flags: list[str] | None = None) -> list[str]:
    """What the INT8 passes among `recipes` choose for the weights on this CPU (or one with
    `flags`), and why; nothing when none runs or each was given `reduce_range`.

    x86 without VNNI/AMX gets 7-bit weights (core.machine.environment.int8_choice)."""
    names = [
        recipe.name
        for recipe in recipes
        if any(
            step.step in CPU_RANGED_PASSES and step.config.get("reduce_range") is None
            for step in recipe.steps
        )
    ]
    if not names:
        return []
    return [
        f"{int8_choice(flags).sentence()} Chosen for {', '.join(names)}; set reduce_range in "
        "the pass settings to override."
    ]
