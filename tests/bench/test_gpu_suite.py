"""bench/gpu_suite.py on a machine without CUDA: one line saying so, exit 0, in seconds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnxruntime as ort
import pytest

ROOT = Path(__file__).resolve().parents[2]
HAS_CUDA_EP = "CUDAExecutionProvider" in ort.get_available_providers()


@pytest.mark.skipif(HAS_CUDA_EP, reason="this machine could run the GPU suite for real")
def test_without_cuda_the_suite_says_so_in_one_line_and_exits_0() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_suite.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )

    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("GPU suite not run: no CUDA device/provider is available")
    assert "dynamic batching" in lines[0] and "FP16" in lines[0]


def test_the_resnet50_shaped_model_is_valid_and_runs_on_the_cpu(tmp_path: Path) -> None:
    import numpy as np
    import onnx

    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from gpu_suite import resnet50_shaped
    finally:
        sys.path.remove(str(ROOT / "bench"))
    path = resnet50_shaped(tmp_path / "r50.onnx")
    onnx.checker.check_model(str(path))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (logits,) = session.run(None, {"input": np.zeros((2, 3, 224, 224), np.float32)})
    assert logits.shape == (2, 1000)
    assert sum(int(np.prod(w.dims)) for w in onnx.load(str(path)).graph.initializer) > 25_000_000
