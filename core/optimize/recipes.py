"""Named recipes (ordered pass lists) and the Auto choice of candidates for a model."""

from __future__ import annotations

import importlib.util
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.backends import backends as registered_backends
from optistudio.core.backends.base import Precision
from optistudio.core.errors import UnknownName
from optistudio.core.machine.environment import int8_choice
from optistudio.core.machine.precisions import FloatFormat, native_float
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
    precision: Precision | None = Field(
        default=None,
        description="Inference precision the variant is checked and timed at (OpenVINO's "
        "INFERENCE_PRECISION_HINT, e.g. 'bf16'); empty = as the passes leave it (fp32, or a "
        "quantized model's int8 layers with the rest in fp32).",
    )


def _recipe(name: str, label: str, *steps: tuple[str, dict[str, Any]]) -> Recipe:
    return Recipe(name=name, label=label, steps=[RecipeStep(step=s, config=c) for s, c in steps])


def _at(precision: Precision, recipe: Recipe) -> Recipe:
    """`recipe` run on OpenVINO at inference precision `precision` (its only backend with one)."""
    return recipe.model_copy(update={"backend": "openvino", "precision": precision})


CAREFUL_CALIBRATION: dict[str, Any] = {
    "preset": "mixed",
    "fast_bias_correction": False,
    "activation_ranges": "global",
}
"""int8_nncf_ov's options in int8_nncf_ov_careful: asymmetric activations, exact bias correction,
activation ranges that clip no calibration sample."""

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
        # Not faster at batch 1 (never among Auto's candidates): it lets a model whose batch
        # is fixed at 1 be batched, by the batching jobs and a server.
        _recipe(
            "dynamic_batch", "Dynamic batch (batch fixed at 1 made free)", ("dynamic_batch", {})
        ),
        # Nor is this: it frees the declared dims the graph does not need (a batch of 10, a
        # 32x32 a fully convolutional detector runs at any size), so the model runs at the
        # shapes its users feed.
        _recipe("free_dims", "Free the declared dims the graph does not need", ("free_dims", {})),
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
# NNCF's INT8 on the model OpenVINO converted (an IR, run on OpenVINO only): what OpenVINO's
# users get by default, `nncf.quantize(ov.convert_model(path), dataset)`, at any opset.
BUILTIN_RECIPES |= {
    r.name: r.model_copy(update={"backend": "openvino"})
    for r in (
        _recipe("int8_nncf_ov", "INT8 NNCF on the OpenVINO model", ("int8_nncf_ov", {})),
        _recipe(
            "int8_nncf_ov_transformer",
            "INT8 NNCF transformer on the OpenVINO model",
            ("int8_nncf_ov", {"model_type": "transformer"}),
        ),
        # The same with asymmetric activations (the mixed preset), NNCF's exact bias correction
        # and activation ranges that clip no calibration sample: Auto adds it when int8_nncf_ov
        # was faster but out of budget, before the accuracy-controlled search
        # (optistudio.core.optimize.accuracy_offer).
        _recipe(
            "int8_nncf_ov_careful",
            "INT8 NNCF on the OpenVINO model, calibrated with care",
            ("int8_nncf_ov", CAREFUL_CALIBRATION),
        ),
        # The same with NNCF's accuracy control against the run's judge: Auto adds it when
        # int8_nncf_ov was faster but out of budget (optistudio.core.optimize.accuracy_offer).
        _recipe(
            "int8_nncf_ov_ac",
            "INT8 NNCF on the OpenVINO model, accuracy-controlled",
            ("int8_nncf_ov_ac", {}),
        ),
    )
}
# Static INT8 kept on the nodes where ONNX Runtime's INT8 kernels beat its FP32 ones (timed node
# by node there), so made for and timed on ONNX Runtime. Auto adds it after the other variants
# when full INT8 did not pay (optistudio.core.optimize.placement_offer).
BUILTIN_RECIPES["int8_placed"] = _recipe(
    "int8_placed", "INT8 where it pays", ("simplify", {}), ("int8_placed", {})
).model_copy(update={"backend": "onnxruntime"})
# A decoder's weights compressed by NNCF for OpenVINO (an IR), timed on OpenVINO.
BUILTIN_RECIPES["int4_nncf"] = _recipe(
    "int4_nncf", "INT4 weight-only NNCF (for OpenVINO)", ("nncf_weights", {"mode": "int4_asym"})
).model_copy(update={"backend": "openvino"})
# A decoder's MatMul weights in 4 or 8 bits (MatMulNBits, RTN, blocks of 32, the embedding and
# LM head at 8 bits): ONNX Runtime's contrib op, so timed there.
BUILTIN_RECIPES |= {
    r.name: r.model_copy(update={"backend": "onnxruntime"})
    for r in (
        _recipe(
            "int4_weight_only",
            "INT4 weight-only (MatMulNBits)",
            ("weight_only", {"bits": 4, "block_size": 32}),
        ),
        _recipe(
            "int8_weight_only",
            "INT8 weight-only (MatMulNBits)",
            ("weight_only", {"bits": 8, "block_size": 32}),
        ),
    )
}
# Precisions the target computes: the model (as it is, or NNCF's INT8) at OpenVINO's inference
# precision. INT8 with the rest in BF16 is what OpenVINO runs a quantized model at by default on a
# BF16 CPU. ONNX Runtime has no such setting (optistudio.core.optimize.applicability says why).
BUILTIN_RECIPES |= {
    r.name: r
    for r in (
        _at("bf16", _recipe("bf16", "BF16 inference")),
        _at("fp16", _recipe("fp16_inference", "FP16 inference")),
        _at(
            "bf16",
            _recipe(
                "int8_nncf_bf16",
                "INT8 NNCF, the rest in BF16",
                ("simplify", {}),
                ("int8_nncf", {}),
            ),
        ),
        _at(
            "bf16",
            _recipe(
                "int8_nncf_transformer_bf16",
                "INT8 NNCF transformer, the rest in BF16",
                ("simplify", {}),
                ("int8_nncf", {"model_type": "transformer"}),
            ),
        ),
        _at(
            "bf16",
            _recipe(
                "int8_nncf_ov_bf16",
                "INT8 NNCF on the OpenVINO model, the rest in BF16",
                ("int8_nncf_ov", {}),
            ),
        ),
        _at(
            "bf16",
            _recipe(
                "int8_nncf_ov_careful_bf16",
                "INT8 NNCF on the OpenVINO model, calibrated with care, the rest in BF16",
                ("int8_nncf_ov", CAREFUL_CALIBRATION),
            ),
        ),
        _at(
            "bf16",
            _recipe(
                "int8_nncf_ov_ac_bf16",
                "INT8 NNCF on the OpenVINO model, accuracy-controlled, the rest in BF16",
                ("int8_nncf_ov_ac", {}),
            ),
        ),
        _at(
            "bf16",
            _recipe(
                "int8_nncf_ov_transformer_bf16",
                "INT8 NNCF transformer on the OpenVINO model, the rest in BF16",
                ("int8_nncf_ov", {"model_type": "transformer"}),
            ),
        ),
    )
}
ANY = "any"
"""Target meaning every backend available on the device: Auto then chooses the backend too."""
REFERENCE_BACKEND = "onnxruntime"
OPENVINO = "openvino"
NNCF_RECIPES = {"int8_nncf", "int8_nncf_transformer"}
OPENVINO_MODEL_NNCF = "int8_nncf_ov"
"""The recipes quantizing the model OpenVINO converted (names starting so)."""
LITERT = "litert"
FP16_PASSES = ("fp16", "litert_fp16")
"""Passes whose model computes in FP16: they pay off only where the CPU computes FP16."""

AUTO = "auto"
DECODER_ONNXRUNTIME = ("int4_weight_only", "int8_weight_only")
DECODER_OPENVINO = ("int4_nncf",)
"""Auto's candidates for a decoder with a KV cache: weight-only, where decoding's time goes."""
CPU_RANGED_PASSES = ("int8_dynamic", "int8_static", "int8_mixed", "int8_placed", "qat")
"""INT8 passes on ONNX Runtime's quantizer whose weight range follows the CPU (reduce_range)."""


def get_recipe(name: str) -> Recipe:
    try:
        return BUILTIN_RECIPES[name]
    except KeyError:
        valid = ", ".join([AUTO, *BUILTIN_RECIPES])
        raise UnknownName(f"Unknown recipe {name!r}. Valid recipes: {valid}.") from None


def auto_candidates(
    info: ModelInfo,
    *,
    target_backend: str = "onnxruntime",
    flags: list[str] | None = None,
    device: str = "cpu",
) -> list[Recipe]:
    """The sensible candidates for this model on a CPU with `flags` (default: this one).

    CNNs (Conv-heavy): fusion and static INT8 (dynamic INT8 quantizes activations at run time,
    which makes convolutions slower on CPUs). Transformers / MLPs (MatMul-heavy): dynamic INT8.
    Target OpenVINO adds its own (see openvino_names). FP16 only when the device computes in
    FP16 natively; elsewhere ONNX Runtime emulates it slowly. A model that is already INT8
    (QDQ, QLinear ops) is not quantized again, but by NNCF on its OpenVINO model
    (`_requantizes`).
    """
    if target_backend == LITERT:
        return litert_candidates(info, flags=flags)
    convs, matmuls = _conv_and_matmul(info)
    names = ["graph"]
    names += ["fusion", "int8_static", "int8_static_percentile"] if convs else []
    names += ["int8_dynamic"] if matmuls > convs else []
    if target_backend == OPENVINO:
        names += openvino_names(info, flags=flags, device=device)
    elif computes("fp16", flags=flags, device=device):
        names += ["fp16"]
    return [BUILTIN_RECIPES[name] for name in names if not _requantizes(info, name)]


def openvino_names(
    info: ModelInfo, *, flags: list[str] | None = None, device: str = "cpu"
) -> list[str]:
    """OpenVINO's own candidates besides the model as it is: NNCF's INT8, CNN or transformer
    flavour, on the model OpenVINO converted (int8_nncf_ov: what OpenVINO's users get by
    default, at any opset; an IR) and on the ONNX graph (int8_nncf: QDQ ONNX, stored with the
    other variants; neither was the faster on every model, docs/BENCHMARKS.md); where the device
    computes them natively, BF16 inference and INT8 with the rest in BF16 (OpenVINO's default
    for a quantized model on such CPUs: timed on the INT8 file already made, no second
    quantization), and FP16 inference."""
    convs, matmuls = _conv_and_matmul(info)
    bf16 = computes("bf16", flags=flags, device=device)
    names = []
    if convs:
        names += _nncf_names(["int8_nncf_ov", "int8_nncf"], bf16=bf16)
    if matmuls > convs:
        names += _nncf_names(["int8_nncf_ov_transformer", "int8_nncf_transformer"], bf16=bf16)
    names += ["bf16"] if bf16 else []
    names += ["fp16_inference"] if computes("fp16", flags=flags, device=device) else []
    return names


def _nncf_names(names: list[str], *, bf16: bool) -> list[str]:
    """The NNCF recipes, then (on a BF16 device) each one's INT8 with the rest in BF16."""
    return names + ([f"{name}_bf16" for name in names] if bf16 else [])


def computes(fmt: FloatFormat, *, flags: list[str] | None = None, device: str = "cpu") -> bool:
    """Whether `device` computes `fmt` natively: a CPU when it has the format's flags
    (optistudio.core.machine.precisions), a GPU always for FP16 and never for BF16 here (no
    recipe runs BF16 on a GPU: OpenVINO's GPU plugin has none)."""
    if device.split(":", 1)[0] == "cpu":
        return native_float(fmt, flags).native
    return fmt == "fp16"


def _conv_and_matmul(info: ModelInfo) -> tuple[int, int]:
    ops = info.op_histogram
    convs = ops.get("Conv", 0) + ops.get("ConvTranspose", 0)
    return convs, ops.get("MatMul", 0) + ops.get("Gemm", 0)


def litert_candidates(info: ModelInfo, *, flags: list[str] | None = None) -> list[Recipe]:
    """Target litert: the .tflite conversions. FP32 always; full-integer INT8 for CNNs (it
    needs calibration data); dynamic-range INT8 for MatMul-heavy models; FP16 weights only
    where they can pay off (a CPU computing FP16; elsewhere XNNPACK widens them to FP32)."""
    convs, matmuls = _conv_and_matmul(info)
    names = ["litert_fp32"]
    names += ["litert_int8"] if convs else []
    names += ["litert_int8_dynamic"] if matmuls > convs else []
    names += ["litert_fp16"] if computes("fp16", flags=flags) else []
    return [BUILTIN_RECIPES[name] for name in names if not _requantizes(info, name)]


def _requantizes(info: ModelInfo, name: str) -> bool:
    """Whether recipe `name` would quantize a model that is INT8 already with a quantizer
    that cannot take one: ONNX Runtime's quantize_static on a QDQ model writes a graph the
    checker refuses, and the ONNX-graph NNCF and LiteRT would quantize its Q/DQ pairs again.
    NNCF on the model OpenVINO converted (int8_nncf_ov*) keeps the file's own INT8 as
    FakeQuantize and quantizes the float layers it left, as `nncf.quantize(ov.convert_model())`
    does for a user: on smart_turn (a QDQ Whisper encoder) 1.94x against BF16's 1.79x, within
    budget, on a CPU with AVX-512 VNNI (docs/BENCHMARKS.md); Auto times it as any candidate."""
    quantizes = name.startswith("int8") or name.startswith("litert_int8")
    return (
        quantizes
        and not name.startswith(OPENVINO_MODEL_NNCF)
        and bool(QUANTIZED_OPS & info.op_histogram.keys())
    )


def any_backend_candidates(
    info: ModelInfo,
    backends: list[str],
    *,
    flags: list[str] | None = None,
    device: str = "cpu",
) -> list[Recipe]:
    """Auto across backends: ONNX Runtime's candidates, and on every other backend the model
    as it is plus, on OpenVINO, its own candidates (openvino_names: NNCF's INT8, and BF16 /
    INT8 with the rest in BF16 / FP16 where the device computes them).

    Graph rewrites and dynamic INT8 are left out for OpenVINO: it fuses on its own, and dynamic
    INT8 ran at 0.78x of FP32 there on MiniLM (docs/BENCHMARKS.md).
    """
    found = [
        on_backend(r, REFERENCE_BACKEND) for r in auto_candidates(info, flags=flags, device=device)
    ]
    for backend in backends:
        if backend in (REFERENCE_BACKEND, LITERT):  # LiteRT converts for minutes: --target litert
            continue
        names = ["fp32"]
        if backend == OPENVINO:
            names += openvino_names(info, flags=flags, device=device)
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
    flags: list[str] | None = None,
    device: str = "cpu",
    decoder: bool = False,
) -> list[Recipe]:
    """Recipe names (or 'auto') to recipes, without duplicates, in the order given.

    With target 'any', `backends` are those available on the device: Auto spreads over them
    (any_backend_candidates) and a named recipe is pinned to its own backend (OpenVINO for the
    NNCF and precision recipes), else to ONNX Runtime. Auto's choice follows a CPU with `flags`
    (default: this one) and `device`; for a `decoder` it is decoder_candidates.
    """
    chosen: dict[str, Recipe] = {}
    for name in names:
        if decoder and name == AUTO:
            found = decoder_candidates(target_backend, backends or [REFERENCE_BACKEND])
        elif target_backend == ANY:
            where = backends or [REFERENCE_BACKEND]
            found = _on_any(name, info, where, flags=flags, device=device)
        elif name == AUTO:
            found = auto_candidates(info, target_backend=target_backend, flags=flags, device=device)
        else:
            found = [get_recipe(name)]
        for recipe in found:
            chosen.setdefault(recipe.name, recipe)
    return list(chosen.values())


def decoder_candidates(target_backend: str, backends: list[str]) -> list[Recipe]:
    """Auto's candidates for a decoder: MatMulNBits INT4 and INT8 where ONNX Runtime is the
    target (or 'any'), NNCF's INT4 where OpenVINO is and NNCF is installed."""
    names: list[str] = []
    if target_backend in (ANY, REFERENCE_BACKEND):
        names += DECODER_ONNXRUNTIME
    if target_backend in (ANY, OPENVINO) and OPENVINO in backends and _has_nncf():
        names += DECODER_OPENVINO
    pinned = [BUILTIN_RECIPES[name] for name in names]
    if target_backend != ANY:
        return pinned
    return [on_backend(recipe, recipe.backend or REFERENCE_BACKEND) for recipe in pinned]


def _has_nncf() -> bool:
    return importlib.util.find_spec("nncf") is not None


def _on_any(
    name: str, info: ModelInfo, backends: list[str], *, flags: list[str] | None, device: str
) -> list[Recipe]:
    if name == AUTO:
        return any_backend_candidates(info, backends, flags=flags, device=device)
    recipe = get_recipe(name)
    backend = recipe.backend or (OPENVINO if name in NNCF_RECIPES else REFERENCE_BACKEND)
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


def with_settings(recipe: Recipe, pass_settings: dict[str, dict[str, Any]]) -> Recipe:
    """The recipe with the user's per-pass settings laid over its steps (what really ran)."""
    steps = [
        step.model_copy(update={"config": step.config | pass_settings.get(step.step, {})})
        for step in recipe.steps
    ]
    return recipe.model_copy(update={"steps": steps})


def available_backends(device: str = "cpu") -> list[str]:
    """Registered backends that can run on this device here, the reference first."""
    kind = device.split(":", 1)[0]
    usable = []
    for spec in registered_backends:
        availability = spec.create().availability()
        if availability.ok and kind in availability.devices:
            usable.append(spec.name)
    return sorted(usable, key=lambda name: name != REFERENCE_BACKEND)
