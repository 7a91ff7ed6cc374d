"""NVIDIA GPUs of this machine, read from `nvidia-smi` (no CUDA library needed to list them).

A machine without the NVIDIA driver has no `nvidia-smi`: that is "no GPU", not an error.
"""

from __future__ import annotations

import shutil
import subprocess
from functools import lru_cache

from pydantic import BaseModel, ConfigDict

QUERY = "index,name,memory.total,driver_version,compute_cap"


class Gpu(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int
    name: str
    memory_mib: int
    driver: str
    compute_capability: str = ""

    @property
    def device(self) -> str:
        return f"cuda:{self.index}"


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """Rows of `nvidia-smi --query-gpu=QUERY --format=csv,noheader,nounits`."""
    gpus = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) < 4 or not fields[0].isdigit():
            continue
        memory = fields[2] if fields[2].isdigit() else "0"
        capability = fields[4] if len(fields) > 4 and "[" not in fields[4] else ""
        gpus.append(
            Gpu(
                index=int(fields[0]),
                name=fields[1],
                memory_mib=int(memory),
                driver=fields[3],
                compute_capability=capability,
            )
        )
    return gpus


@lru_cache(maxsize=1)
def nvidia_gpus() -> tuple[Gpu, ...]:
    """The NVIDIA GPUs the driver reports; empty without a driver (cached per process)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ()
    try:
        done = subprocess.run(
            [smi, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ()
    if done.returncode != 0:  # e.g. an old driver without compute_cap: ask for less
        done = subprocess.run(
            [
                smi,
                "--query-gpu=index,name,memory.total,driver_version",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    return tuple(parse_nvidia_smi(done.stdout)) if done.returncode == 0 else ()


def gpu_memory_bytes(index: int) -> int | None:
    """Total memory of GPU `index`, or None when the driver does not report it."""
    for gpu in nvidia_gpus():
        if gpu.index == index and gpu.memory_mib:
            return gpu.memory_mib * 1024 * 1024
    return None
