"""The LiteRT backend: what it says when its extra is missing (simulated, so these run with or
without the extra), and with the extra (`make test-extras`) its outputs against ONNX Runtime.
The shared contract runs it too (tests/core/backends/test_backend_contract.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from optistudio.core.backends import SessionOptions, get_backend, litert_convert
from optistudio.core.errors import BackendUnavailable, InvalidSpec

HAS_RUNTIME = importlib.util.find_spec("ai_edge_litert") is not None
HAS_CONVERTER = litert_convert.missing_converter() is None
needs_extra = pytest.mark.skipif(
    not (HAS_RUNTIME and HAS_CONVERTER),
    reason="needs the litert extra (pip install 'optistudio[litert]'): "
    + (litert_convert.missing_converter() or "ai-edge-litert is not installed"),
)


def test_without_the_interpreter_it_is_unavailable_and_says_how_to_add_it(
    monkeypatch: pytest.MonkeyPatch, tiny_model: Path
) -> None:
    monkeypatch.setitem(sys.modules, "ai_edge_litert", None)  # import now raises ImportError

    availability = get_backend("litert").availability()

    assert not availability.ok
    assert "ai-edge-litert is not installed" in availability.reason
    assert "pip install 'optistudio[litert]'" in availability.reason
    with pytest.raises(BackendUnavailable, match="LiteRT cannot run here") as raised:
        get_backend("litert").load(tiny_model, SessionOptions())
    assert raised.value.hint == "pip install 'optistudio[litert]'"


def test_without_the_converter_a_conversion_says_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, tiny_model: Path, tmp_path: Path
) -> None:
    monkeypatch.setattr(
        litert_convert, "_version", lambda name: None if name == "onnx2tf" else "1.0"
    )

    with pytest.raises(BackendUnavailable, match=r"onnx2tf missing") as raised:
        litert_convert.convert(tiny_model, tmp_path / "m.tflite", "fp32")
    assert raised.value.hint == "pip install 'optistudio[litert]'"


def test_full_integer_int8_without_calibration_is_refused_before_converting(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(litert_convert, "missing_converter", lambda: None)

    outcome = litert_convert.convert_many(tiny_model, {"int8": tmp_path / "m.tflite"})

    assert outcome["int8"] == {
        "ok": False,
        "error": "full-integer INT8 needs calibration data (a few hundred inputs)",
    }


def test_calibration_keeps_at_most_the_sample_limit(tmp_path: Path) -> None:
    batches = [{"x": np.full((50, 16), i, np.float32)} for i in range(5)]

    path = litert_convert.write_calibration(batches, tmp_path / "c.npz")

    saved = np.load(path)["x"]
    assert saved.shape == (litert_convert.CALIBRATION_SAMPLES, 16)
    assert saved[-1, 0] == 2  # the third batch was cut, the rest never read


@pytest.mark.extras
@needs_extra
def test_litert_matches_onnxruntime_fp32(tiny_model: Path) -> None:
    feeds = {"x": np.random.default_rng(3).standard_normal((4, 16)).astype(np.float32)}

    ours = get_backend("litert").load(tiny_model, SessionOptions(threads=1))
    theirs = get_backend("onnxruntime").load(tiny_model, SessionOptions())

    np.testing.assert_allclose(ours.run(feeds)[0], theirs.run(feeds)[0], atol=1e-5, rtol=1e-5)
    assert ours.details["converted_from_onnx"] is True
    assert ours.details["delegate"] == "XNNPACK"


@pytest.mark.extras
@needs_extra
def test_litert_refuses_a_gpu_device(tiny_model: Path) -> None:
    with pytest.raises(InvalidSpec, match="Valid devices: cpu"):
        get_backend("litert").load(tiny_model, SessionOptions(device="cuda:0"))
