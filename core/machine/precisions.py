"""Which float formats this CPU computes natively (BF16, FP16), read from its ISA flags.

BF16: AVX512-BF16 (bf16 pairs multiplied and added into fp32: Cooper Lake, Sapphire Rapids and
later Xeons, AMD Zen 4 and later) or AMX-BF16 (tile multiplies). OpenVINO's CPU plugin lists BF16
among its capabilities there and makes it its default inference precision; elsewhere it offers
no BF16.

FP16: AVX512-FP16 (Sapphire Rapids and later) or AMX-FP16 (Granite Rapids). Elsewhere a runtime
converts FP16 to FP32 and back around each kernel, which is slower than FP32.

Kept in each worker's inventory beside the INT8 choice, and read by Auto to decide which
precision recipes it times.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.machine.environment import isa_flags

FloatFormat = Literal["bf16", "fp16"]
NATIVE_FLAGS: dict[str, tuple[str, ...]] = {
    "bf16": ("avx512_bf16", "amx_bf16"),
    "fp16": ("avx512_fp16", "amx_fp16"),
}
"""Float format -> the x86 flags of which any one computes it."""
FORMATS: tuple[FloatFormat, ...] = ("bf16", "fp16")
FLAG_NAMES = {
    "avx512_bf16": "AVX512-BF16",
    "amx_bf16": "AMX-BF16",
    "avx512_fp16": "AVX512-FP16",
    "amx_fp16": "AMX-FP16",
}


class NativeFloat(BaseModel):
    """Whether a CPU computes one float format natively, the flags that say so, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: FloatFormat
    native: bool = Field(description="The CPU has one of the format's compute flags.")
    flags: list[str] = Field(description="The format's compute flags this CPU has.")
    reason: str = Field(description="One clause naming the flags found, or those missing.")


def native_float(fmt: FloatFormat, flags: list[str] | None = None) -> NativeFloat:
    """Whether a CPU with `flags` (default: this one) computes `fmt` natively."""
    present = set(isa_flags() if flags is None else flags)
    wanted = NATIVE_FLAGS[fmt]
    found = [flag for flag in wanted if flag in present]
    names = " or ".join(FLAG_NAMES[flag] for flag in wanted)
    if found:
        reason = f"this CPU has {', '.join(FLAG_NAMES[flag] for flag in found)}"
    elif present:
        reason = f"this CPU has no {names}"
    else:
        reason = f"this CPU's flags could not be read, so {names} cannot be assumed"
    return NativeFloat(format=fmt, native=bool(found), flags=found, reason=reason)


def native_floats(flags: list[str] | None = None) -> dict[str, NativeFloat]:
    """Both formats for a CPU with `flags` (default: this one), for the inventory."""
    present = isa_flags() if flags is None else flags
    return {fmt: native_float(fmt, present) for fmt in FORMATS}
