"""What a machine offers: backends, devices and GPUs, as the router reads them."""

from __future__ import annotations

from core.inventory import hardware_inventory, offers


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
