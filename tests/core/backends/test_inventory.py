"""What a machine offers: backends, devices and GPUs, as the router reads them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from optistudio.core.backends.inventory import hardware_inventory, offers, targets, trains_on


def gpu_worker() -> dict:
    return {
        "backends": {
            "onnxruntime": {"available": True, "devices": ["cpu", "cuda"]},
            "tensorrt": {"available": False, "devices": [], "reason": "tensorrt is not installed"},
        },
        "gpus": [{"index": 0, "name": "NVIDIA H200", "memory_mib": 143771, "driver": "580"}],
    }


def test_a_cuda_target_needs_that_gpu_index() -> None:
    inventory = gpu_worker()
    assert offers(inventory, backend="onnxruntime", device="cuda")
    assert offers(inventory, backend="onnxruntime", device="cuda:0")
    assert not offers(inventory, backend="onnxruntime", device="cuda:1")
    assert offers(inventory, backend="onnxruntime", device="cpu")
    assert not offers(inventory, backend="tensorrt", device="cuda:0")
    assert not offers(inventory, backend="openvino", device="cpu")


def test_this_machines_inventory_has_cpu_backends_and_a_gpu_list() -> None:
    inventory = hardware_inventory()
    assert inventory["backends"]["onnxruntime"]["available"]
    assert offers(inventory, backend="onnxruntime", device="cpu")
    assert isinstance(inventory["gpus"], list)
    assert inventory["cpu"]["logical_cores"] >= 1
    training = inventory["training"]  # where QAT trains: torch's device, or nothing
    has_torch = importlib.util.find_spec("torch") is not None
    assert (training["torch"] is not None) == has_torch
    assert trains_on(inventory) == (training["device"] if has_torch else None)
    assert trains_on({"backends": {}}) is None  # an inventory from before the entry


def test_targets_expand_gpus_and_use_each_devices_precisions() -> None:
    inventory = gpu_worker()
    inventory["backends"]["onnxruntime"]["device_precisions"] = {
        "cpu": ["fp32", "int8"],
        "cuda": ["fp32", "int8", "fp16"],
    }
    inventory["gpus"].append({"index": 1, "name": "NVIDIA T4", "memory_mib": 15360, "driver": "5"})
    found = targets(inventory)
    assert ("onnxruntime", "cpu", "fp32") in found
    assert ("onnxruntime", "cuda:1", "fp16") in found
    assert ("onnxruntime", "cpu", "fp16") not in found
    assert not [t for t in found if t[0] == "tensorrt"]


def test_this_machines_openvino_lists_only_precisions_its_cpu_runs(tiny_model: Path) -> None:
    from optistudio.core.backends import SessionOptions, get_backend
    from optistudio.core.errors import InvalidSpec

    inventory = hardware_inventory()
    entry = inventory["backends"]["openvino"]
    if not entry["available"]:
        pytest.skip(f"openvino cannot run here: {entry.get('reason')}")
    listed = entry["device_precisions"]["cpu"]
    assert "fp32" in listed
    for precision in ("bf16", "fp16"):  # listed exactly when the backend accepts it
        options = SessionOptions(precision=precision)
        try:
            get_backend("openvino").load(tiny_model, options).close()
            accepted = True
        except InvalidSpec:
            accepted = False
        assert (precision in listed) == accepted, precision


def test_the_inventory_carries_the_flags_that_decide_int8_and_the_choice() -> None:
    from optistudio.core.backends.inventory import int8_mode
    from optistudio.core.machine.environment import int8_choice

    inventory = hardware_inventory()
    int8 = inventory["cpu"]["int8"]

    assert set(int8) >= {"vnni", "avx512_vnni", "avx_vnni", "amx_int8", "reduce_range", "reason"}
    assert int8_mode(inventory) == int8_choice(inventory["cpu"]["isa_flags"])


def test_an_inventory_from_before_int8_is_read_from_its_flags() -> None:
    from optistudio.core.backends.inventory import int8_mode

    avx2 = int8_mode({"cpu": {"isa_flags": ["avx", "avx2"]}})
    vnni = int8_mode({"cpu": {"isa_flags": ["avx2", "avx512f", "avx512_vnni"]}})

    assert avx2.reduce_range and avx2.label() == "7-bit weights (no VNNI/AMX)"
    assert not vnni.reduce_range and vnni.label() == "8-bit weights (AVX512-VNNI)"
