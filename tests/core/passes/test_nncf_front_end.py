"""int8_nncf_ov's and int8_nncf_ov_ac's float_front_end: the ops that feed a Log (a spectrum
computed in the graph) kept in float, on a model built here that takes a waveform, computes its
power spectrum by two matrix products, takes its log and classifies it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import openvino as ov
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.passes.base import PassContext
from optistudio.core.passes.nncf_openvino import (
    NncfOpenVinoConfig,
    log_front_end,
    run_int8_nncf_ov,
)
from tests.core.passes.test_nncf import build_cnn

SAMPLES, BINS, CLASSES = 256, 64, 10


def build_log_spectrum(folder: Path) -> Path:
    """wave [N, 256] -> real and imaginary parts by a DFT's cosine and sine rows -> power ->
    log (floored at 1e-6) -> dense + ReLU -> dense: the shape of a speech-quality regressor's
    front end and head."""
    rng = np.random.default_rng(0)
    t = np.arange(SAMPLES)[:, None]
    k = np.arange(BINS)[None, :]
    cos = np.cos(2 * np.pi * t * k / SAMPLES).astype(np.float32)
    sin = np.sin(2 * np.pi * t * k / SAMPLES).astype(np.float32)
    inits = [
        numpy_helper.from_array(cos, "cos"),
        numpy_helper.from_array(sin, "sin"),
        numpy_helper.from_array(np.array(1e-6, np.float32), "floor"),
        numpy_helper.from_array(rng.normal(0, 0.2, (BINS, 32)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.normal(0, 0.2, (32, CLASSES)).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["wave", "cos"], ["re"], name="stft_real"),
        helper.make_node("MatMul", ["wave", "sin"], ["im"], name="stft_imag"),
        helper.make_node("Mul", ["re", "re"], ["re2"], name="re_squared"),
        helper.make_node("Mul", ["im", "im"], ["im2"], name="im_squared"),
        helper.make_node("Add", ["re2", "im2"], ["power"], name="power"),
        helper.make_node("Max", ["power", "floor"], ["floored"], name="floored"),
        helper.make_node("Log", ["floored"], ["log_power"], name="log_power"),
        helper.make_node("MatMul", ["log_power", "w1"], ["h"], name="dense1"),
        helper.make_node("Relu", ["h"], ["hr"], name="relu"),
        helper.make_node("MatMul", ["hr", "w2"], ["scores"], name="dense2"),
    ]
    graph = helper.make_graph(
        nodes,
        "log_spectrum",
        [helper.make_tensor_value_info("wave", TensorProto.FLOAT, ["N", SAMPLES])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", CLASSES])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    path = folder / "log_spectrum.onnx"
    onnx.save(model, path)
    return path


class Waves:
    """Seeded tones of random pitch and loudness over decades, with faint noise: a power
    spectrum whose values span many decades."""

    name = "wave"

    def __init__(self, batches: int = 4, rows: int = 8) -> None:
        self._batches, self._rows = batches, rows

    def batches(self) -> Iterator[dict[str, np.ndarray]]:
        rng = np.random.default_rng(1)
        t = np.arange(SAMPLES, dtype=np.float32)
        for _ in range(self._batches):
            pitch = rng.integers(2, BINS - 2, (self._rows, 1))
            loud = 10.0 ** rng.uniform(-3, 0, (self._rows, 1))
            tone = loud * np.sin(2 * np.pi * pitch * t / SAMPLES)
            noise = rng.normal(0, 1e-4, (self._rows, SAMPLES))
            yield {"wave": (tone + noise).astype(np.float32)}

    @property
    def description(self) -> str:
        return "seeded tones"


def _quantize(model: Path, folder: Path, **config: object) -> tuple[Path, object]:
    context = PassContext(work_dir=folder, calibration=Waves())
    options = NncfOpenVinoConfig.model_validate({"subset_size": 32} | config)
    report = run_int8_nncf_ov(model, folder / "out.onnx", options, context)
    return report.output, report


def _fed_by_fake_quantize(ir: Path) -> set[str]:
    """The ops of the IR that read a FakeQuantize's output."""
    model = ov.Core().read_model(str(ir))
    return {
        target.get_node().get_friendly_name()
        for op in model.get_ops()
        if op.get_type_name() == "FakeQuantize"
        for target in op.output(0).get_target_inputs()
    }


def test_the_front_end_is_every_op_that_feeds_the_log_and_nothing_after_it(
    tmp_path: Path,
) -> None:
    front = set(log_front_end(ov.convert_model(str(build_log_spectrum(tmp_path)))))

    assert {"stft_real", "stft_imag", "power", "wave"} <= front
    assert not front & {"log_power", "dense1", "dense2"}
    assert log_front_end(ov.convert_model(str(build_cnn(tmp_path, opset=13)))) == []


@pytest.mark.parametrize("keep", [False, True], ids=["defaults", "float-front-end"])
def test_float_front_end_leaves_the_spectrum_unquantized_and_the_head_int8(
    tmp_path: Path, keep: bool
) -> None:
    model = build_log_spectrum(tmp_path)
    front = set(log_front_end(ov.convert_model(str(model))))

    ir, report = _quantize(model, tmp_path, float_front_end=keep)

    quantized = _fed_by_fake_quantize(ir)
    assert report.details["log_front_end_ops"] == len(front)
    assert report.details["float_front_end"] == (len(front) if keep else 0)
    assert "dense1" in quantized or "dense2" in quantized  # the head is INT8 either way
    assert bool(quantized & front) is not keep  # NNCF quantizes the DFT unless told not to


def test_float_front_end_on_a_model_without_a_log_says_so(tmp_path: Path) -> None:
    from tests.core.passes.test_nncf import RandomImages

    context = PassContext(work_dir=tmp_path, calibration=RandomImages(batches=2))
    options = NncfOpenVinoConfig(subset_size=16, float_front_end=True)
    report = run_int8_nncf_ov(build_cnn(tmp_path, opset=13), tmp_path / "o.onnx", options, context)

    assert report.details["float_front_end"] == 0
    assert any("no Log op" in warning for warning in report.warnings)


def test_the_accuracy_controlled_search_starts_with_the_front_end_in_float(tmp_path: Path) -> None:
    from optistudio.core.numerics.accuracy import AccuracyBudget
    from optistudio.core.optimize.variant_judge import RunJudge
    from optistudio.core.passes.base import passes

    model = build_log_spectrum(tmp_path)
    front = set(log_front_end(ov.convert_model(str(model))))
    context = PassContext(
        work_dir=tmp_path,
        target_backend="openvino",
        calibration=Waves(),
        judge=RunJudge(model, Waves(batches=2), AccuracyBudget(), "int8"),
    )
    config = {"subset_size": 32, "float_front_end": True}
    report = passes.get("int8_nncf_ov_ac").run(model, tmp_path / "ac.onnx", config, context)

    assert report.details["float_front_end"] == report.details["log_front_end_ops"] == len(front)
    assert not _fed_by_fake_quantize(report.output) & front
