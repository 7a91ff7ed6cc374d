"""ONNX Runtime on a real NVIDIA GPU (CUDA and TensorRT execution providers).

Marked `gpu`: skipped unless this ONNX Runtime build has the CUDA provider and nvidia-smi lists
a GPU. Self-contained (no conftest fixtures) so it also runs with `pytest --noconftest` on a GPU
machine that has only onnxruntime-gpu, numpy, onnx and pydantic.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.backends import SessionOptions, get_backend
from optistudio.core.errors import BackendUnavailable
from optistudio.core.machine.gpus import nvidia_gpus

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        "CUDAExecutionProvider" not in ort.get_available_providers() or not nvidia_gpus(),
        reason="needs onnxruntime-gpu and an NVIDIA GPU",
    ),
]


def conv_model(path: Path) -> Path:
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "W")
    dense = numpy_helper.from_array(rng.standard_normal((8 * 16 * 16, 10)).astype(np.float32), "D")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("Flatten", ["r"], ["f"]),
            helper.make_node("MatMul", ["f", "D"], ["y"]),
        ],
        "gpu_test",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])],
        initializer=[weight, dense],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.fixture
def model_path(tmp_path: Path) -> Path:
    return conv_model(tmp_path / "conv.onnx")


def feeds(batch: int = 4) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).standard_normal((batch, 3, 16, 16)).astype(np.float32)}


def cpu_outputs(path: Path, data: dict[str, np.ndarray]) -> np.ndarray:
    return get_backend("onnxruntime").load(path, SessionOptions()).run(data)[0]


def test_cuda_runs_on_the_gpu_and_agrees_with_the_cpu(model_path: Path) -> None:
    model = get_backend("onnxruntime").load(model_path, SessionOptions(device="cuda:0"))
    assert model.details["providers"][0] == "CUDAExecutionProvider"
    np.testing.assert_allclose(
        model.run(feeds())[0], cpu_outputs(model_path, feeds()), rtol=1e-3, atol=1e-3
    )


def test_io_binding_on_the_gpu_gives_the_same_outputs(model_path: Path) -> None:
    data = feeds()
    model = get_backend("onnxruntime").load(
        model_path, SessionOptions(device="cuda:0", io_binding=True)
    )
    first, second = model.run(data)[0], model.run(data)[0]
    np.testing.assert_array_equal(first, second)
    np.testing.assert_allclose(first, cpu_outputs(model_path, data), rtol=1e-3, atol=1e-3)


def test_memory_pool_ratio_caps_the_cuda_arena(model_path: Path) -> None:
    options = SessionOptions(device="cuda:0", memory_pool_ratio=0.05)
    details = get_backend("onnxruntime").load(model_path, options).details
    assert details["memory_pool"].startswith("CUDA arena capped at")


def test_tensorrt_provider_runs_or_its_fallback_is_reported(model_path: Path) -> None:
    if "TensorrtExecutionProvider" not in ort.get_available_providers():
        pytest.skip("this onnxruntime-gpu build has no TensorRT provider")
    options = SessionOptions(device="cuda:0", execution_provider="tensorrt", precision="fp16")
    try:
        model = get_backend("onnxruntime").load(model_path, options)
    except BackendUnavailable as exc:  # TensorRT's libraries are missing: said, not hidden
        assert "fell back" in exc.message
        return
    assert model.details["providers"][0] == "TensorrtExecutionProvider"
    np.testing.assert_allclose(
        model.run(feeds())[0], cpu_outputs(model_path, feeds()), rtol=5e-2, atol=5e-2
    )


def test_a_missing_gpu_index_is_refused(model_path: Path) -> None:
    missing = max(gpu.index for gpu in nvidia_gpus()) + 1
    with pytest.raises(BackendUnavailable, match=f"No CUDA device cuda:{missing}"):
        get_backend("onnxruntime").load(model_path, SessionOptions(device=f"cuda:{missing}"))


def test_benchmark_engine_on_cuda_with_output_check(model_path: Path) -> None:
    from optistudio.core.measure.benchmark import BenchmarkSpec, run_benchmark

    spec = BenchmarkSpec(
        device="cuda:0", batch_sizes=[1, 8], warmup_runs=3, min_runs=20, max_seconds=3.0
    )
    report = run_benchmark(model_path, spec)
    assert [r.batch_size for r in report.results] == [1, 8]
    assert report.output_check is not None and report.output_check.passed
    assert report.runtime_details["providers"][0] == "CUDAExecutionProvider"
    print(
        "cuda p50 ms:",
        {r.batch_size: round(r.latency["p50_ms"], 4) for r in report.results},
        "output check:",
        report.output_check.summary,
    )
