"""The environment fingerprint stored with every measurement, so comparisons stay honest."""

from __future__ import annotations

import os
import platform
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import psutil

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


def int8_weights_need_reduced_range(flags: list[str] | None = None) -> bool:
    """Whether 8-bit weights can saturate ONNX Runtime's INT8 kernels on this CPU.

    On x86 without VNNI/AMX the u8 x s8 kernels multiply pairs and add them in int16
    (vpmaddubsw), which saturates when both products are large: 255 * 127 * 2 > 32767.
    ONNX Runtime's guidance there is 7-bit weights (reduce_range) or U8U8; with VNNI/AMX
    (dot products straight into int32) and on Arm, full 8-bit weights are exact.
    """
    present = set(isa_flags() if flags is None else flags)
    x86 = bool(present & {"sse4_2", "avx", "avx2", "avx512f"})
    return x86 and not present & set(INT8_DOT_PRODUCT_FLAGS)


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
