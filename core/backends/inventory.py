"""What a machine can serve: its backends (with availability), CPU and GPUs, for the worker table."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from optistudio.core.backends import backends
from optistudio.core.backends.onnxruntime_backend import execution_providers
from optistudio.core.machine.environment import (
    Int8Choice,
    cpu_model,
    int8_choice,
    isa_flags,
    library_versions,
)
from optistudio.core.machine.gpus import nvidia_gpus
from optistudio.core.machine.precisions import native_floats


def hardware_inventory(offered: list[str] | None = None) -> dict[str, Any]:
    """Backends this machine offers (all registered, or only `offered`) and its CPU.

    A backend that is registered but cannot run here is listed with available=False and the
    reason, so the studio can say why a target is missing; ONNX Runtime's entry also lists its
    execution providers, each with why it cannot run here when it cannot. The CPU's `int8` entry holds the
    flags that decide INT8 weights (VNNI, AMX) and the choice the INT8 passes make here; its
    `floats` entry whether it computes BF16 and FP16 natively, and why (what decides the
    precision recipes Auto times: optistudio.core.optimize.applicability.applicable_on).
    """
    import psutil

    flags = isa_flags()
    entries = {}
    for spec in backends:
        if offered and spec.name not in offered:
            continue
        availability = spec.create().availability()
        entries[spec.name] = {
            "available": availability.ok,
            "reason": availability.reason,
            "devices": availability.devices if availability.ok else [],
            "precisions": spec.precisions,
            "device_precisions": {
                device: availability.precisions.get(device, spec.precisions)
                for device in (availability.devices if availability.ok else [])
            },
            "versions": availability.versions,
        }
        if spec.name == "onnxruntime":
            entries[spec.name]["providers"] = execution_providers()
    return {
        "backends": entries,
        "cpu": {
            "model": cpu_model(),
            "isa_flags": flags,
            "int8": int8_choice(flags).model_dump(),
            "floats": {fmt: found.model_dump() for fmt, found in native_floats(flags).items()},
            "logical_cores": psutil.cpu_count(logical=True),
            "physical_cores": psutil.cpu_count(logical=False),
        },
        "gpus": [gpu.model_dump() for gpu in nvidia_gpus()],
        "libraries": library_versions(),
        "training": training_inventory(),
    }


def training_inventory() -> dict[str, Any]:
    """Whether this machine can run quantization-aware training (the qat extra's torch), and
    on what: 'cuda' when torch sees a GPU, else 'cpu'. Imports torch (the inventory is taken
    in a throw-away process)."""
    if importlib.util.find_spec("torch") is None:
        return {"torch": None, "device": None}
    import torch

    return {"torch": torch.__version__, "device": "cuda" if torch.cuda.is_available() else "cpu"}


def trains_on(inventory: Mapping[str, Any]) -> str | None:
    """Where a worker with this inventory fine-tunes: 'cuda', 'cpu', or None (no torch; an
    inventory from before the entry reads as None)."""
    device = inventory.get("training", {}).get("device")
    return str(device) if device else None


def offers(inventory: dict[str, Any], *, backend: str, device: str) -> bool:
    """True when the inventory has `backend` available on `device` ('cpu', 'cuda', 'cuda:1').

    A CUDA device with an index must also be one of the machine's GPUs.
    """
    entry = inventory.get("backends", {}).get(backend)
    kind, _, index = device.partition(":")
    if not (entry and entry["available"] and kind in entry["devices"]):
        return False
    if kind == "cuda" and index:
        return any(str(gpu.get("index")) == index for gpu in inventory.get("gpus", []))
    return True


def pick_queue(
    live: Sequence[tuple[Sequence[str], dict[str, Any]]],
    *,
    backend: str,
    device: str,
    suits: Callable[[dict[str, Any]], int] | None = None,
) -> str | None:
    """The first queue of the live worker (queues, inventory) that offers `backend` on `device`
    and that `suits` ranks first (lower first; ties keep the workers' order); None if none."""
    able = [
        (queues, inventory)
        for queues, inventory in live
        if queues and offers(inventory, backend=backend, device=device)
    ]
    if not able:
        return None
    queues, _ = min(able, key=lambda worker: suits(worker[1]) if suits else 0)
    return str(queues[0])


def targets(inventory: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Every (backend, device, precision) a machine can run; CUDA devices by GPU index."""
    found = []
    gpus = [f"cuda:{gpu['index']}" for gpu in inventory.get("gpus", [])]
    for backend, entry in inventory.get("backends", {}).items():
        if not entry.get("available"):
            continue
        by_device = entry.get("device_precisions") or {}
        for kind in entry.get("devices", []):
            devices = gpus if kind == "cuda" and gpus else [kind]
            for device in devices:
                for precision in by_device.get(kind, entry.get("precisions", [])):
                    found.append((backend, device, precision))
    return found


def int8_mode(inventory: dict[str, Any]) -> Int8Choice:
    """The INT8 choice a worker reported; inventories from before it are read from their flags."""
    cpu = inventory.get("cpu", {})
    if cpu.get("int8"):
        return Int8Choice.model_validate(cpu["int8"])
    return int8_choice(list(cpu.get("isa_flags", [])))
