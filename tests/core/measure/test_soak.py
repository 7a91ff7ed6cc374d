from __future__ import annotations

import contextlib
import ctypes
import gc
import mmap
from pathlib import Path

import numpy as np
import onnx
import pytest
from diagnostic_models import build_unloadable
from onnx import TensorProto, helper

from optistudio.core.backends import LoadedModel, SessionOptions, get_backend
from optistudio.core.errors import ModelLoadError
from optistudio.core.measure.soak import SoakSpec, fit_growth, input_variants, soak, soak_loaded
from optistudio.core.model.intake import inspect_model

LEAK_BYTES = 64 * 1024
RESERVED_BYTES = 64 * 2**20


class LeakingModel(LoadedModel):
    """A real session whose wrapper makes `leak_bytes` more memory resident on every run.

    It writes the next slice of a buffer that was only reserved: an anonymous mapping of its
    own (not the heap's, which in a long test process can hand back memory already resident,
    and not NumPy's, which asks for huge pages), so every slice written shows in RSS.
    """

    def __init__(self, inner: LoadedModel, leak_bytes: int) -> None:
        self.inner, self.leak_bytes, self.offset = inner, leak_bytes, 0
        self.mapping = mmap.mmap(-1, RESERVED_BYTES)
        self.buffer = np.frombuffer(self.mapping, dtype=np.uint8)
        self.details = inner.details

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        end = min(self.offset + self.leak_bytes, RESERVED_BYTES)
        self.buffer[self.offset : end] = 1
        self.offset = end
        return self.inner.run(feeds)


def _trim_heap() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _variants(model: Path) -> list[dict[str, np.ndarray]]:
    return input_variants(inspect_model(model), SoakSpec())[0]


def test_a_leaking_wrapper_is_flagged(tiny_model: Path) -> None:
    leaking = LeakingModel(
        get_backend("onnxruntime").load(tiny_model, SessionOptions()), LEAK_BYTES
    )
    spec = SoakSpec(seconds=60, max_inferences=500, sample_interval_s=0.001, min_growth_mb=2)

    # Memory other tests freed can leave the process during the run and hide the slope
    # (CI once read "stable"): collect and hand freed heap back first, and hold the collector.
    gc.collect()
    _trim_heap()
    gc.disable()
    try:
        report = soak_loaded(leaking, _variants(tiny_model), spec)
    finally:
        gc.enable()

    assert report.verdict == "leak suspected", report.sentence
    assert report.slope_low <= LEAK_BYTES * 1.05 and report.slope_high >= LEAK_BYTES * 0.9
    assert "Leak suspected" in report.sentence and "per inference" in report.sentence


@pytest.mark.timing
def test_a_clean_session_is_stable(tiny_model: Path) -> None:
    spec = SoakSpec(seconds=1.5, sample_interval_s=0.02)
    report = soak(tiny_model, spec)

    assert report.verdict == "stable", report.sentence
    # A clean session drifts by a few bytes per inference, so its fitted growth follows how many
    # inferences the machine ran (2.4 MiB once on a fast CPU): what keeps it stable is that one
    # of the leak's conditions fails, never a growth this machine happened to stay under.
    assert (
        report.slope_low <= 0
        or report.slope_bytes < spec.min_slope_bytes
        or report.fitted_growth_mb < spec.min_growth_mb
    ), report
    assert report.inferences > 100
    assert {tuple(v["x"]) for v in report.variants} == {(1, 16), (2, 16), (4, 16), (8, 16)}
    assert "GPU" not in report.gpu_memory or "not sampled" in report.gpu_memory


def test_fit_growth_recovers_a_linear_slope_and_its_interval() -> None:
    rng = np.random.default_rng(0)
    samples = [
        (i * 100, i * 0.1, 100 + i * 100 * 2000 / 2**20 + rng.normal(0, 0.01)) for i in range(50)
    ]

    slope, low, high = fit_growth(samples)  # type: ignore[misc]

    assert low < 2000 < high
    assert abs(slope - 2000) < 100


def test_fit_growth_of_flat_noise_straddles_zero() -> None:
    rng = np.random.default_rng(1)
    samples = [(i * 100, i * 0.1, 100 + rng.normal(0, 0.05)) for i in range(60)]

    _, low, high = fit_growth(samples)  # type: ignore[misc]

    assert low < 0 < high


def test_too_few_samples_cannot_be_judged(tiny_model: Path) -> None:
    model = get_backend("onnxruntime").load(tiny_model, SessionOptions())
    spec = SoakSpec(seconds=60, max_inferences=10, sample_interval_s=30)

    report = soak_loaded(model, _variants(tiny_model), spec)

    assert report.verdict == "too short"
    assert fit_growth([(0, 0.0, 1.0)]) is None


def test_dynamic_dims_are_cycled(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "seq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "sequence"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "seq.onnx")

    variants = input_variants(inspect_model(tmp_path / "seq.onnx"), SoakSpec(batch_sizes=[1, 2]))[0]

    assert sorted(v["x"].shape for v in variants) == [(1, 8), (1, 16), (2, 8), (2, 16)]


def test_soak_of_a_model_that_does_not_load_says_why(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError):
        soak(build_unloadable(tmp_path / "custom.onnx"), SoakSpec(seconds=1))


def test_growth_below_the_per_inference_floor_is_not_called_a_leak(tiny_model: Path) -> None:
    leaking = LeakingModel(
        get_backend("onnxruntime").load(tiny_model, SessionOptions()), LEAK_BYTES
    )
    spec = SoakSpec(
        seconds=60, max_inferences=300, sample_interval_s=0.001, min_slope_bytes=10 * LEAK_BYTES
    )

    report = soak_loaded(leaking, _variants(tiny_model), spec)

    assert report.slope_low > 0 and report.fitted_growth_mb > 2
    assert report.verdict == "stable"
