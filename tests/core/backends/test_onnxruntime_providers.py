"""ONNX Runtime execution providers, devices, IO binding and GPU listing (CPU-only machine)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from optistudio.core.backends import SessionOptions, get_backend
from optistudio.core.backends.onnxruntime_backend import execution_providers
from optistudio.core.errors import BackendUnavailable, InvalidSpec
from optistudio.core.machine.gpus import parse_nvidia_smi

HAS_CUDA_EP = "CUDAExecutionProvider" in ort.get_available_providers()
HAS_CANN_EP = "CANNExecutionProvider" in ort.get_available_providers()


def feeds(batch: int = 2, seed: int = 0) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((batch, 16)).astype(np.float32)}


def test_io_binding_gives_the_plain_outputs_and_follows_new_inputs(tiny_model: Path) -> None:
    backend = get_backend("onnxruntime")
    plain = backend.load(tiny_model, SessionOptions())
    bound = backend.load(tiny_model, SessionOptions(io_binding=True))
    assert bound.details["io_binding"] is True
    first, second = feeds(seed=1), feeds(batch=3, seed=2)
    for data in (first, first, second, first):
        np.testing.assert_array_equal(bound.run(data)[0], plain.run(data)[0])
    bound.close()


@pytest.mark.skipif(HAS_CUDA_EP, reason="this ONNX Runtime build has a CUDA provider")
def test_cuda_without_a_cuda_build_says_which_package_is_missing(tiny_model: Path) -> None:
    with pytest.raises(BackendUnavailable, match="no cuda execution provider") as error:
        get_backend("onnxruntime").load(tiny_model, SessionOptions(device="cuda:0"))
    assert "onnxruntime-gpu" in (error.value.hint or "")


@pytest.mark.skipif(HAS_CANN_EP, reason="this ONNX Runtime build has a CANN provider")
@pytest.mark.parametrize(("device", "provider"), [("cpu", "cann"), ("npu:0", None)])
def test_cann_without_onnxruntime_cann_says_what_ascend_needs(
    tiny_model: Path, device: str, provider: str | None
) -> None:
    options = SessionOptions(device=device, execution_provider=provider)
    with pytest.raises(BackendUnavailable, match="no cann execution provider") as error:
        get_backend("onnxruntime").load(tiny_model, options)
    assert "Ascend CANN toolkit and an Ascend NPU driver" in error.value.message
    assert "onnxruntime-cann" in (error.value.hint or "")


def test_every_provider_is_listed_with_why_it_cannot_run_here() -> None:
    listed = execution_providers()
    assert set(listed) == {"cpu", "cuda", "tensorrt", "openvino", "dnnl", "cann"}
    assert listed["cpu"] == {"device": "cpu", "available": True, "reason": ""}
    assert listed["cann"]["device"] == "npu"
    assert listed["cann"]["available"] is HAS_CANN_EP
    for entry in listed.values():
        assert entry["available"] or entry["reason"]
    if not HAS_CANN_EP:
        assert listed["cann"]["reason"] == (
            "needs Huawei's Ascend CANN toolkit and an Ascend NPU driver; "
            "onnxruntime-cann is not installed"
        )


@pytest.mark.parametrize(
    ("device", "provider", "message"),
    [
        ("cuda:0", "cpu", "runs on cpu, not on cuda"),
        ("npu:0", "cpu", "runs on cpu, not on npu"),
        ("cpu", "rocm", "Valid providers: cpu, cuda, tensorrt, openvino, dnnl, cann"),
        ("tpu", None, "Valid devices: cpu, cuda:N"),
        ("cuda:x", None, "Valid devices: cpu, cuda:N"),
    ],
)
def test_impossible_device_and_provider_pairs_are_refused(
    tiny_model: Path, device: str, provider: str | None, message: str
) -> None:
    options = SessionOptions(device=device, execution_provider=provider)
    with pytest.raises(InvalidSpec, match=message):
        get_backend("onnxruntime").load(tiny_model, options)


def test_int8_runs_as_stored_and_fp16_needs_tensorrt(tiny_model: Path) -> None:
    backend = get_backend("onnxruntime")
    assert backend.load(tiny_model, SessionOptions(precision="int8")).details["precision"] == "int8"
    with pytest.raises(InvalidSpec, match="Valid precisions: fp32, int8"):
        backend.load(tiny_model, SessionOptions(precision="fp16"))


def test_availability_lists_providers_and_only_devices_it_can_use() -> None:
    availability = get_backend("onnxruntime").availability()
    assert availability.ok
    assert "providers: cpu" in availability.reason
    assert "onnxruntime" in availability.versions
    if not HAS_CUDA_EP:
        assert availability.devices == ["cpu"]


def test_nvidia_smi_rows_are_parsed() -> None:
    text = (
        "0, NVIDIA H200, 143771, 580.159.03, 9.0\n"
        "1, NVIDIA T4, 15360, 535.54.03, [N/A]\n"
        "garbage line\n"
    )
    gpus = parse_nvidia_smi(text)
    assert [gpu.device for gpu in gpus] == ["cuda:0", "cuda:1"]
    assert gpus[0].name == "NVIDIA H200" and gpus[0].memory_mib == 143771
    assert gpus[0].compute_capability == "9.0" and gpus[1].compute_capability == ""
    assert parse_nvidia_smi("") == []
