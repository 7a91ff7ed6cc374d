"""bench/qat_nncf.py: NNCF's QAT flow on a tiny Sequential CNN, end to end in seconds."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the qat extra: pip install 'optistudio[qat]'")
pytest.importorskip("nncf", reason="needs nncf")
pytest.importorskip("openvino", reason="needs openvino")
pytestmark = pytest.mark.extras

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from qat_nncf import nncf_qat_anchor  # noqa: E402


def _data(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two classes a CNN separates at once: bright top half or bright bottom half."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, count).astype(np.int64)
    x = rng.normal(0.0, 0.1, (count, 1, 8, 8)).astype(np.float32)
    x[y == 0, 0, :4, :] += 1.0
    x[y == 1, 0, 4:, :] += 1.0
    return x, y


@pytest.fixture
def no_extension_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """NNCF compiles a C++ CPU extension for its fake quantizers on first use (about 2 minutes
    on 2 cores) and falls back on its torch reference functions when that fails: the test
    takes the fallback, the bench the compiled extension."""
    import torch.utils.cpp_extension

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("not compiled in tests")

    monkeypatch.setattr(torch.utils.cpp_extension, "load", refuse)


def test_quantizes_trains_exports_and_times_a_sequential_cnn(
    tmp_path: Path, no_extension_build: None
) -> None:
    torch.manual_seed(0)
    nn = torch.nn
    module = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 2)
    )
    x_train, y_train = _data(120, 0)
    x_test, y_test = _data(40, 1)
    optimizer = torch.optim.Adam(module.parameters(), lr=1e-2)
    for _ in range(30):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(
            module(torch.from_numpy(x_train)), torch.from_numpy(y_train)
        )
        loss.backward()
        optimizer.step()

    result = nncf_qat_anchor(
        module, x_train, y_train, x_test, y_test, epochs=2, batch=8, seconds=0.1, folder=tmp_path
    )

    assert result["fp32_top1"] > 0.9
    assert result["qat_top1"] > 0.9 and result["ptq_top1"] > 0.9
    assert 1 <= result["epochs_run"] <= 2 and 0 <= result["best_epoch"] <= 2
    assert (
        result["layer_precisions"]["qat"].get("u8", 0)
        + result["layer_precisions"]["qat"].get("i8", 0)
        > 0
    )
    for name in ("fp32_ir", "ptq_ir", "qat_ir", "qat_onnx_qdq"):
        assert Path(result["paths"][name]).exists(), result["notes"]
    assert result["onnx_qdq_top1"] == pytest.approx(result["qat_top1"], abs=0.05)
    speed = result["speed"]["qat"]
    assert speed["pairs"] >= 30 and speed["ratio_low"] <= speed["ratio"] <= speed["ratio_high"]
