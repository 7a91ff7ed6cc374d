"""Which recipes apply on a worker, and why each of the others does not, in one sentence.

A recipe applies when its backend runs on the device here and, when it computes in BF16 or FP16
(an inference precision such as bf16@openvino, or an FP16 pass), the device computes that
format natively (optistudio.core.optimize.recipes.computes): elsewhere OpenVINO refuses BF16 and
FP16 runs slower than FP32. Auto times only recipes that apply (and suit the model).

ONNX Runtime has no BF16 counterpart (ONNXRUNTIME_NOTES): its CPU provider runs a model in the
precision its file holds, has no BF16 MatMul, Gemm or Conv kernels on x86, and runs a quantized
model's float layers in FP32. Its FP16 is the fp16 recipe (a graph pass), which applies where
the CPU computes FP16.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.backends import backends as registered
from optistudio.core.backends.base import Availability
from optistudio.core.machine.precisions import FLAG_NAMES, NATIVE_FLAGS, FloatFormat, native_float
from optistudio.core.optimize.recipes import (
    BUILTIN_RECIPES,
    FP16_PASSES,
    NNCF_RECIPES,
    OPENVINO,
    Recipe,
    computes,
)


class Applicability(BaseModel):
    """Whether one recipe applies on a worker's device, and if not, why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    recipe: str
    backend: str | None = Field(description="The backend it runs on; empty = the run's target.")
    computes: FloatFormat | None = Field(
        description="bf16 or fp16 when it computes in that format; empty otherwise."
    )
    applies: bool = Field(description="Its backend runs here and the device computes its format.")
    why_not: str | None = Field(default=None, description="Why not, in one sentence.")


class NotOffered(BaseModel):
    """A precision a backend has no recipe for, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: str
    precision: str
    why: str


ONNXRUNTIME_NOTES = (
    NotOffered(
        backend="onnxruntime",
        precision="bf16",
        why="ONNX Runtime's CPU provider runs a model in the precision its file holds and has no "
        "BF16 MatMul, Gemm or Conv kernels on x86, so it has no BF16 recipe; bf16 runs on "
        "OpenVINO.",
    ),
    NotOffered(
        backend="onnxruntime",
        precision="int8+bf16",
        why="ONNX Runtime runs a quantized model's float layers in FP32 on the CPU; INT8 with the "
        "rest in BF16 is int8_nncf_bf16, on OpenVINO.",
    ),
)


def float_format(recipe: Recipe) -> FloatFormat | None:
    """bf16 / fp16 when the recipe computes in it (its inference precision, or an FP16 pass)."""
    if recipe.precision == "bf16" or recipe.precision == "fp16":
        return recipe.precision
    return "fp16" if any(step.step in FP16_PASSES for step in recipe.steps) else None


def applicability(
    recipe: Recipe,
    backends: Mapping[str, Availability],
    *,
    flags: list[str] | None = None,
    device: str = "cpu",
) -> Applicability:
    """Whether `recipe` applies on `device` of a worker whose backends are `backends` (name ->
    availability) and whose CPU has `flags` (default: this one)."""
    backend = recipe.backend or (OPENVINO if recipe.name in NNCF_RECIPES else None)
    fmt = float_format(recipe)
    why = _backend_missing(backend, backends, device) or _format_missing(recipe, fmt, flags, device)
    return Applicability(
        recipe=recipe.name, backend=backend, computes=fmt, applies=why is None, why_not=why
    )


def applicable_recipes(
    *,
    flags: list[str] | None = None,
    backends: Mapping[str, Availability] | None = None,
    device: str = "cpu",
) -> dict[str, Applicability]:
    """Every built-in recipe's applicability by name, on this machine unless `flags` and
    `backends` say otherwise (reading this machine's backends imports their runtimes)."""
    found = backends if backends is not None else this_machines_backends()
    return {
        name: applicability(recipe, found, flags=flags, device=device)
        for name, recipe in BUILTIN_RECIPES.items()
    }


def this_machines_backends() -> dict[str, Availability]:
    return {spec.name: spec.create().availability() for spec in registered}


def applicable_on(inventory: Mapping[str, Any], device: str = "cpu") -> dict[str, Applicability]:
    """The same from a worker's inventory (optistudio.core.backends.inventory), so the studio
    can say which recipes apply on which worker without running anything there."""
    found = {
        name: Availability(
            ok=bool(entry.get("available")),
            reason=str(entry.get("reason", "")),
            devices=list(entry.get("devices", [])),
        )
        for name, entry in inventory.get("backends", {}).items()
    }
    flags = list(inventory.get("cpu", {}).get("isa_flags", []))
    return applicable_recipes(flags=flags, backends=found, device=device)


def _backend_missing(
    backend: str | None, backends: Mapping[str, Availability], device: str
) -> str | None:
    if backend is None:
        return None
    found = backends.get(backend)
    kind = device.split(":", 1)[0]
    if found is None:
        return f"It runs on {backend}, which this worker does not offer."
    if not found.ok:
        return f"It runs on {backend}, which cannot run here: {found.reason.rstrip('.')}."
    if kind not in found.devices:
        return (
            f"It runs on {backend}, which has no {kind} device here ({', '.join(found.devices)})."
        )
    return None


def _format_missing(
    recipe: Recipe, fmt: FloatFormat | None, flags: list[str] | None, device: str
) -> str | None:
    if fmt is None or computes(fmt, flags=flags, device=device):
        return None
    if device.split(":", 1)[0] != "cpu":
        return (
            f"{recipe.name} computes in BF16, which no recipe runs on {device}; a CPU with it does."
        )
    needs = " or ".join(FLAG_NAMES[flag] for flag in NATIVE_FLAGS[fmt])
    reason = native_float(fmt, flags).reason
    if recipe.precision == "fp16":
        return f"{recipe.name} needs a CPU with {needs}, or a GPU; {reason}."
    if fmt == "fp16":
        return (
            f"{recipe.name} pays off only on a CPU with {needs} (elsewhere FP16 is converted to "
            f"FP32 and back around each kernel, slower than FP32); {reason}."
        )
    return f"{recipe.name} needs a CPU with {needs}; {reason}."
