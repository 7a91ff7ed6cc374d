"""The environment fingerprint stored with every measurement, so comparisons stay honest."""

from __future__ import annotations

import os
import platform
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Literal

import psutil
from pydantic import BaseModel, ConfigDict, Field

INTERESTING_FLAGS = (
    "sse4_2",
    "fma",
    "f16c",
    "avx",
    "avx2",
    "avx_vnni",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
    "amx_fp16",
    "asimd",
    "asimddp",
    "sve",
)
"""CPU features that decide which kernels (INT8 VNNI/AMX, BF16, FP16) a runtime can use."""

INT8_DOT_PRODUCT_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
"""x86 instructions that multiply-add 8-bit integers into 32 bits without an int16 step."""

LIBRARIES = ("onnx", "onnxruntime", "openvino", "numpy", "tensorrt")


@lru_cache(maxsize=1)
def _cpuinfo() -> dict[str, str]:
    path = Path("/proc/cpuinfo")
    if not path.exists():
        return {}
    fields: dict[str, str] = {}
    for line in path.read_text(errors="replace").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    return fields


def cpu_model() -> str:
    info = _cpuinfo()
    return info.get("model name") or platform.processor() or platform.machine()


def isa_flags() -> list[str]:
    """The interesting ISA flags this CPU has, in a stable order."""
    info = _cpuinfo()
    present = set((info.get("flags") or info.get("Features") or "").split())
    return [flag for flag in INTERESTING_FLAGS if flag in present]


X86_FLAGS = ("sse4_2", "avx", "avx2", "avx512f")
"""Any of these says the CPU is x86 (Arm reports asimd / sve instead)."""

FLAG_NAMES = {"avx512_vnni": "AVX512-VNNI", "avx_vnni": "AVX-VNNI", "amx_int8": "AMX-INT8"}


def int8_weights_need_reduced_range(flags: list[str] | None = None) -> bool:
    """Whether 8-bit weights can saturate ONNX Runtime's INT8 kernels on this CPU.

    On x86 without VNNI/AMX the u8 x s8 kernels multiply pairs and add them in int16
    (vpmaddubsw), which saturates when both products are large: 255 * 127 * 2 > 32767.
    ONNX Runtime's guidance there is 7-bit weights (reduce_range) or U8U8; with VNNI/AMX
    (dot products straight into int32) and on Arm, full 8-bit weights are exact.
    """
    present = set(isa_flags() if flags is None else flags)
    x86 = bool(present & set(X86_FLAGS))
    return x86 and not present & set(INT8_DOT_PRODUCT_FLAGS)


class Int8Choice(BaseModel):
    """The INT8 weight range chosen for a CPU, the flags that decide it, and why.

    Kept in each worker's inventory (the Hardware page, routing) and told by Auto and the INT8
    passes when the user left `reduce_range` unset.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    flags_read: bool = Field(description="The CPU's flags could be read at all.")
    x86: bool = Field(description="The CPU reports x86 vector flags (SSE4.2, AVX...).")
    vnni: bool = Field(description="AVX512-VNNI or AVX-VNNI.")
    avx512_vnni: bool = Field(description="AVX512-VNNI: 8-bit dot products into int32.")
    avx_vnni: bool = Field(description="AVX-VNNI: the same on 256-bit registers.")
    amx_int8: bool = Field(description="AMX-INT8: 8-bit tile matrix multiplies.")
    reduce_range: bool = Field(description="Weights quantized to 7 bits instead of 8.")
    weights: Literal["7-bit", "8-bit"]
    reason: str = Field(description="Why, in one clause, naming the flags.")

    def label(self) -> str:
        """A table cell: '7-bit weights (no VNNI/AMX)', '8-bit weights (AVX512-VNNI)'."""
        found = [name for flag, name in FLAG_NAMES.items() if getattr(self, flag)]
        why = ", ".join(found) or (
            "no VNNI/AMX" if self.x86 else "not x86" if self.flags_read else "CPU flags unknown"
        )
        return f"{self.weights} weights ({why})"

    def sentence(self) -> str:
        """One line for notes and logs: 'INT8 weights 7-bit (reduce_range): ...'."""
        mode = "7-bit (reduce_range)" if self.reduce_range else "8-bit"
        return f"INT8 weights {mode}: {self.reason}."


def int8_choice(flags: list[str] | None = None) -> Int8Choice:
    """What ONNX Runtime's INT8 passes choose on a CPU with `flags` (default: this one)."""
    present = set(isa_flags() if flags is None else flags)
    found = [FLAG_NAMES[flag] for flag in INT8_DOT_PRODUCT_FLAGS if flag in present]
    x86 = bool(present & set(X86_FLAGS))
    reduce = int8_weights_need_reduced_range(sorted(present))
    return Int8Choice(
        flags_read=bool(present),
        x86=x86,
        vnni=bool(present & {"avx512_vnni", "avx_vnni"}),
        avx512_vnni="avx512_vnni" in present,
        avx_vnni="avx_vnni" in present,
        amx_int8="amx_int8" in present,
        reduce_range=reduce,
        weights="7-bit" if reduce else "8-bit",
        reason=_int8_reason(x86, found, bool(present)),
    )


def _int8_reason(x86: bool, found: list[str], known: bool) -> str:
    if found:
        return f"this CPU has {', '.join(found)}, whose 8-bit dot products do not saturate"
    if x86:
        return (
            "this x86 CPU has no VNNI/AMX: its 8-bit kernels add pairs of products in 16 bits, "
            "which full 8-bit weights can saturate (ONNX Runtime's guidance)"
        )
    if known:
        return "this CPU is not x86; its 8-bit kernels do not saturate"
    return "this CPU's flags could not be read, so ONNX Runtime's default applies"


def library_versions() -> dict[str, str]:
    """Versions of the inference libraries installed (read from metadata, nothing imported)."""
    found = {}
    for name in LIBRARIES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def fingerprint(
    *, threads: int | None = None, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A JSON-serialisable description of where a measurement was taken."""
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    data: dict[str, Any] = {
        "cpu_model": cpu_model(),
        "isa_flags": isa_flags(),
        "logical_cores": psutil.cpu_count(logical=True),
        "physical_cores": psutil.cpu_count(logical=False),
        "affinity": affinity,
        "threads": threads,
        "machine": platform.machine(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "libraries": library_versions(),
    }
    data.update(extra or {})
    return data
