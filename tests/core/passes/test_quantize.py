from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from pydantic import ValidationError

from optistudio.core.errors import DataMismatch, PassFailed, describe_validation_error
from optistudio.core.numerics.calibration import (
    METHODS,
    HistogramCollector,
    collect_activation_stats,
    compute_ranges,
)
from optistudio.core.passes import quantize
from optistudio.core.passes.base import PassContext
from optistudio.core.passes.quantize import (
    CONV_WARNING,
    INT8_DYNAMIC,
    INT8_STATIC,
    Int8DynamicConfig,
    Int8StaticConfig,
    run_int8_dynamic,
    run_int8_static,
)

CNN_INPUT = (4, 3, 16, 16)
MLP_INPUT = (8, 64)


def _save(nodes: list, inputs: list, outputs: list, weights: dict, path: Path) -> Path:
    initializers = [numpy_helper.from_array(value, name) for name, value in weights.items()]
    graph = helper.make_graph(nodes, "tiny", inputs, outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def _weights(rng: np.random.Generator, **shapes: tuple[int, ...]) -> dict[str, np.ndarray]:
    return {
        name: (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]) or 1)).astype(np.float32)
        for name, shape in shapes.items()
    }


@pytest.fixture
def cnn(tmp_path: Path) -> Path:
    """Conv -> Relu -> Conv -> GlobalAveragePool -> Flatten -> Gemm."""
    rng = np.random.default_rng(1)
    weights = _weights(rng, w1=(8, 3, 3, 3), b1=(8,), w2=(8, 8, 3, 3), b2=(8,), w3=(4, 8), b3=(4,))
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["c2"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], name="fc", transB=1),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 16, 16])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])]
    return _save(nodes, inputs, outputs, weights, tmp_path / "cnn.onnx")


@pytest.fixture
def mlp(tmp_path: Path) -> Path:
    """MatMul -> Add -> Relu -> MatMul -> Add."""
    rng = np.random.default_rng(2)
    weights = _weights(rng, w1=(64, 128), b1=(128,), w2=(128, 32), b2=(32,))
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"], name="fc1"),
        helper.make_node("Add", ["m1", "b1"], ["a1"], name="bias1"),
        helper.make_node("Relu", ["a1"], ["r1"], name="relu"),
        helper.make_node("MatMul", ["r1", "w2"], ["m2"], name="fc2"),
        helper.make_node("Add", ["m2", "b2"], ["y"], name="bias2"),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 32])]
    return _save(nodes, inputs, outputs, weights, tmp_path / "mlp.onnx")


class RandomBatches:
    """A calibration source: `count` seeded normal batches for one input."""

    description = "random normal batches"

    def __init__(self, shape: tuple[int, ...], count: int = 8, name: str = "x", seed: int = 0):
        self.shape, self.count, self.name, self.seed = shape, count, name, seed

    def batches(self) -> Iterator[dict[str, np.ndarray]]:
        rng = np.random.default_rng(self.seed)
        for _ in range(self.count):
            yield {self.name: rng.standard_normal(self.shape).astype(np.float32)}


def _context(tmp_path: Path, source: RandomBatches | None = None) -> PassContext:
    return PassContext(work_dir=tmp_path / "work", calibration=source)


def _run(model: Path, inputs: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    output: np.ndarray = session.run(None, {"x": inputs})[0]
    return output


def _cosine(model: Path, quantized: Path, shape: tuple[int, ...]) -> float:
    inputs = np.random.default_rng(99).standard_normal(shape).astype(np.float32)
    a, b = _run(model, inputs).ravel(), _run(quantized, inputs).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _op_types(model: Path) -> set[str]:
    return {node.op_type for node in onnx.load(model).graph.node}


# --- calibration maths -------------------------------------------------------------------------


def _skewed_batches() -> list[np.ndarray]:
    """4M lognormal values (99.99% below 7) with two outliers at 1000."""
    rng = np.random.default_rng(5)
    batches = [rng.lognormal(0.0, 0.5, 200_000).astype(np.float32) for _ in range(20)]
    batches[3][0] = batches[11][7] = 1000.0
    return batches


def _quantization_mse(values: np.ndarray, low: float, high: float) -> float:
    """Mean squared error of uint8 asymmetric quantize-dequantize over [low, high] (with 0)."""
    low, high = min(low, 0.0), max(high, 0.0)
    scale = (high - low) / 255
    zero = np.round(-low / scale)
    restored = (np.clip(np.round(values / scale) + zero, 0, 255) - zero) * scale
    return float(np.mean((values.astype(np.float64) - restored) ** 2))


@pytest.fixture(scope="module")
def skewed() -> tuple[np.ndarray, dict[str, tuple[float, float]]]:
    batches = _skewed_batches()
    collector = HistogramCollector()
    for batch in batches:
        collector.update(batch)
    ranges = {
        method: compute_ranges(method, {"t": collector}, percentile=99.99)["t"]
        for method in METHODS
    }
    return np.concatenate(batches), ranges


def test_minmax_is_the_observed_range(skewed) -> None:
    values, ranges = skewed
    assert ranges["minmax"] == (pytest.approx(values.min()), 1000.0)


def test_distribution_is_symmetric_but_keeps_an_unseen_side_closed() -> None:
    signed, positive = HistogramCollector(), HistogramCollector()
    signed.update(np.array([-1.0, 0.5, 3.0]))
    positive.update(np.array([0.0, 0.5, 3.0]))
    ranges = compute_ranges("distribution", {"signed": signed, "positive": positive})
    assert ranges == {"signed": (-3.0, 3.0), "positive": (0.0, 3.0)}


@pytest.mark.parametrize("method", ["percentile", "entropy", "mse"])
def test_clipping_methods_cut_the_outliers(skewed, method: str) -> None:
    values, ranges = skewed
    low, high = ranges[method]
    assert low == pytest.approx(values.min())
    assert np.quantile(values, 0.99) < high < ranges["minmax"][1] / 2


def test_mse_threshold_is_the_closed_form_optimum(skewed) -> None:
    """E(t) = N t^2 / (12 * 255^2) + k (M - t)^2 for N values below t and k outliers at M."""
    values, ranges = skewed
    inliers, outliers, outlier = values.size - 2, 2, 1000.0
    optimum = outliers * outlier / (outliers + inliers / (12 * 255**2))
    assert ranges["mse"][1] == pytest.approx(optimum, rel=0.01)


def test_mse_threshold_beats_minmax_on_quantization_error(skewed) -> None:
    values, ranges = skewed
    errors = {method: _quantization_mse(values, *pair) for method, pair in ranges.items()}
    assert errors["mse"] < errors["minmax"] / 2
    assert min(errors, key=errors.__getitem__) == "mse"


def test_percentile_grows_with_the_percentile() -> None:
    collector = HistogramCollector()
    collector.update(np.random.default_rng(0).standard_normal(100_000).astype(np.float32))
    highs = [compute_ranges("percentile", {"t": collector}, p)["t"][1] for p in (90, 99, 99.99)]
    assert highs == sorted(highs) and highs[0] < highs[-1]


def test_rebinning_keeps_counts_and_matches_binning_at_once() -> None:
    rng = np.random.default_rng(3)
    small, large = rng.uniform(-1, 1, 5000), rng.uniform(-7, 7, 5000)
    streamed, at_once = HistogramCollector(256), HistogramCollector(256)
    streamed.update(small)
    assert streamed.upper == 1.0
    streamed.update(large)
    at_once.update(np.concatenate([large, small]))
    assert streamed.upper == at_once.upper == 8.0
    assert streamed.counts.sum() == streamed.total == 10_000
    np.testing.assert_array_equal(streamed.counts, at_once.counts)


def test_collectors_merge_like_one_collector() -> None:
    rng = np.random.default_rng(4)
    parts = [rng.standard_normal(1000) * scale for scale in (0.1, 30.0)]
    left, right, whole = HistogramCollector(), HistogramCollector(), HistogramCollector()
    left.update(parts[0])
    right.update(parts[1])
    whole.update(np.concatenate(parts))
    left.merge(right)
    np.testing.assert_array_equal(left.counts, whole.counts)
    assert (left.low, left.high, left.total) == (whole.low, whole.high, whole.total)


def test_non_finite_values_are_ignored() -> None:
    collector = HistogramCollector()
    collector.update(np.array([1.0, np.nan, np.inf, -2.0], dtype=np.float32))
    assert (collector.low, collector.high, collector.total) == (-2.0, 1.0, 2)


def _state_shape(collector: HistogramCollector) -> list[tuple[str, tuple[int, ...]]]:
    return [(name, np.shape(value)) for name, value in sorted(vars(collector).items())]


def test_collector_state_does_not_grow_with_batches() -> None:
    rng = np.random.default_rng(6)
    few, many = HistogramCollector(), HistogramCollector()
    for index in range(100):
        batch = rng.standard_normal(1000) * (index + 1)
        many.update(batch)
        if index < 10:
            few.update(batch)
    assert _state_shape(few) == _state_shape(many)


def test_streamed_model_stats_do_not_grow_with_batches(mlp: Path, tmp_path: Path) -> None:
    def stats(count: int):
        return collect_activation_stats(
            mlp, RandomBatches(MLP_INPUT, count), work_dir=tmp_path, progress=progress
        )

    reports: list[tuple[float, str]] = []
    progress = lambda fraction, message: reports.append((fraction, message))  # noqa: E731
    few, many = stats(10), stats(100)
    assert (few.batches, many.batches) == (10, 100)
    assert sorted(few.collectors) == sorted(many.collectors) == ["a1", "m1", "m2", "r1", "x", "y"]
    for name, collector in many.collectors.items():
        assert _state_shape(collector) == _state_shape(few.collectors[name])
        assert collector.total == 10 * few.collectors[name].total
    assert len(reports) == 110 and reports[-1][1] == "calibration batch 100"
    assert not list(tmp_path.glob("calibration_augmented*"))


def test_a_batch_without_the_model_input_is_a_data_mismatch(mlp: Path, tmp_path: Path) -> None:
    with pytest.raises(DataMismatch, match="lacks input"):
        collect_activation_stats(mlp, RandomBatches(MLP_INPUT, name="wrong"), work_dir=tmp_path)


# --- passes ------------------------------------------------------------------------------------


def test_int8_dynamic_on_mlp(mlp: Path, tmp_path: Path) -> None:
    out = tmp_path / "mlp.int8.onnx"
    report = run_int8_dynamic(mlp, out, Int8DynamicConfig(), _context(tmp_path))
    assert out.stat().st_size < mlp.stat().st_size / 2
    assert {"MatMulInteger", "DynamicQuantizeLinear"} <= _op_types(out)
    assert report.details["quantized_nodes"] == {"MatMul": 2}
    assert report.warnings == []
    assert _cosine(mlp, out, MLP_INPUT) > 0.99


def test_int8_dynamic_warns_about_convolutions(cnn: Path, tmp_path: Path) -> None:
    out = tmp_path / "cnn.int8.onnx"
    report = run_int8_dynamic(cnn, out, Int8DynamicConfig(), _context(tmp_path))
    assert CONV_WARNING in report.warnings
    assert "ConvInteger" in _op_types(out)


@pytest.mark.parametrize("method", METHODS)
def test_int8_static_on_cnn(cnn: Path, tmp_path: Path, method: str) -> None:
    out = tmp_path / f"cnn.{method}.onnx"
    config = Int8StaticConfig(calibration=method, max_batches=5)
    report = run_int8_static(cnn, out, config, _context(tmp_path, RandomBatches(CNN_INPUT)))
    assert {"QuantizeLinear", "DequantizeLinear"} <= _op_types(out)
    assert report.details["quantized_nodes"]["Conv"] == 2
    assert report.details["calibration"]["method"] == method
    assert report.details["calibration"]["batches"] == 5
    assert report.details["preprocessed"] is True
    assert _cosine(cnn, out, CNN_INPUT) > 0.995


@pytest.mark.parametrize("method", METHODS)
def test_int8_static_on_mlp_keeps_relu_exact(mlp: Path, tmp_path: Path, method: str) -> None:
    """ORT folds the ReLU into the range of its output, which must therefore start at 0."""
    out = tmp_path / f"mlp.{method}.onnx"
    config = Int8StaticConfig(calibration=method, max_batches=5)
    report = run_int8_static(mlp, out, config, _context(tmp_path, RandomBatches(MLP_INPUT)))
    assert "Relu" not in _op_types(out)
    assert report.details["quantized_nodes"] == {"Gemm": 2}
    assert _cosine(mlp, out, MLP_INPUT) > 0.99


def test_ranges_reach_onnxruntime_the_same_way_on_older_versions(
    cnn: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def quantize_cnn(name: str) -> tuple[str, dict[str, np.ndarray]]:
        out = tmp_path / f"{name}.onnx"
        context = _context(tmp_path / name, RandomBatches(CNN_INPUT, count=3))
        report = run_int8_static(cnn, out, Int8StaticConfig(calibration="mse"), context)
        scales = {i.name: numpy_helper.to_array(i) for i in onnx.load(out).graph.initializer}
        return report.details["ranges_handed_over_as"], scales

    cache_route, cache_scales = quantize_cnn("cache")
    monkeypatch.setattr(quantize, "_ort_reads_range_cache", lambda: False)
    override_route, override_scales = quantize_cnn("overrides")
    assert (cache_route, override_route) == ("calibration_cache", "tensor_quant_overrides")
    assert cache_scales.keys() == override_scales.keys()
    for name, value in cache_scales.items():
        np.testing.assert_allclose(override_scales[name], value, rtol=1e-6, err_msg=name)


def test_int8_static_without_calibration_fails_readably(cnn: Path, tmp_path: Path) -> None:
    with pytest.raises(PassFailed, match="static INT8 needs calibration data"):
        run_int8_static(cnn, tmp_path / "out.onnx", Int8StaticConfig(), _context(tmp_path))


@pytest.fixture
def elementwise(tmp_path: Path) -> Path:
    """Exp -> Neg: no op static INT8 quantizes, so nothing to calibrate."""
    nodes = [helper.make_node("Exp", ["x"], ["e"]), helper.make_node("Neg", ["e"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 64])]
    return _save(nodes, inputs, outputs, {}, tmp_path / "elementwise.onnx")


def test_nothing_to_calibrate_is_empty_stats_not_a_crash(elementwise: Path, tmp_path: Path) -> None:
    stats = collect_activation_stats(
        elementwise, RandomBatches(MLP_INPUT), op_types=["Conv", "MatMul"], work_dir=tmp_path
    )

    assert (stats.collectors, stats.batches) == ({}, 0)


@pytest.mark.parametrize("count", [3, 0], ids=["some-batches", "no-batches"])
def test_int8_static_with_nothing_to_quantize_fails_plainly(
    elementwise: Path, tmp_path: Path, count: int
) -> None:
    source = RandomBatches(MLP_INPUT, count=count)

    with pytest.raises(PassFailed) as caught:
        run_int8_static(
            elementwise, tmp_path / "out.onnx", Int8StaticConfig(), _context(tmp_path, source)
        )

    assert caught.value.message.startswith("Static INT8 has nothing to quantize in this model")
    assert "(Exp, Neg)" in caught.value.message
    assert "op_types" in (caught.value.hint or "")


def test_calibration_data_without_a_batch_is_a_data_mismatch(mlp: Path, tmp_path: Path) -> None:
    with pytest.raises(DataMismatch, match="yielded no batch") as caught:
        run_int8_static(
            mlp,
            tmp_path / "out.onnx",
            Int8StaticConfig(),
            _context(tmp_path, RandomBatches(MLP_INPUT, 0)),
        )

    assert "at least one sample" in (caught.value.hint or "")


@pytest.mark.parametrize(
    ("asked", "expected"),
    [(None, None), (True, "7-bit weights, as asked"), (False, "8-bit weights, as asked")],
    ids=["cpu-decides", "asked-7", "asked-8"],
)
def test_int8_reports_its_weight_range_and_why(
    mlp: Path, tmp_path: Path, asked: bool | None, expected: str | None
) -> None:
    from optistudio.core.machine.environment import int8_choice

    out = tmp_path / "mlp.int8.onnx"
    report = run_int8_dynamic(mlp, out, Int8DynamicConfig(reduce_range=asked), _context(tmp_path))

    choice = int8_choice()
    assert report.details["reduce_range"] == (
        expected or f"{choice.weights} weights: {choice.reason}"
    )


def test_pass_info_runs_end_to_end_from_a_dict(mlp: Path, tmp_path: Path) -> None:
    out = tmp_path / "mlp.mse.onnx"
    source = RandomBatches(MLP_INPUT, count=10)
    config = {"calibration": "mse", "max_batches": 3, "nodes_to_exclude": ["fc2"]}
    report = INT8_STATIC.run(mlp, out, config, _context(tmp_path, source))
    assert report.output == out and out.exists()
    assert report.details["calibration"]["batches"] == 3
    assert report.details["quantized_nodes"].get("MatMul") == 1
    assert _cosine(mlp, out, MLP_INPUT) > 0.98


def test_unknown_config_field_is_a_readable_error(mlp: Path, tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as caught:
        INT8_DYNAMIC.run(mlp, tmp_path / "out.onnx", {"per_chanel": False}, _context(tmp_path))
    assert describe_validation_error(caught.value) == "per_chanel: Extra inputs are not permitted"


def test_unknown_excluded_node_is_a_warning(mlp: Path, tmp_path: Path) -> None:
    config = Int8DynamicConfig(nodes_to_exclude=["fc9"])
    report = run_int8_dynamic(mlp, tmp_path / "out.onnx", config, _context(tmp_path))
    assert report.warnings == ["nodes_to_exclude names no node of the model: fc9"]


def test_passes_are_registered_through_entry_points() -> None:
    points = {point.name: point for point in entry_points(group="optistudio.passes")}
    assert points["int8_dynamic"].load() is INT8_DYNAMIC
    assert points["int8_static"].load() is INT8_STATIC
    assert (INT8_STATIC.needs_calibration, INT8_STATIC.produces_precision) == (True, "int8")


def test_per_channel_static_int8_upgrades_an_old_opset(cnn: Path, tmp_path: Path) -> None:
    import onnx

    from optistudio.core.passes.quantize import INT8_STATIC

    model = onnx.load(cnn)
    model.opset_import[0].version = 12
    onnx.save(model, cnn)
    context = _context(tmp_path, RandomBatches((2, 3, 16, 16), count=4))

    report = INT8_STATIC.run(cnn, tmp_path / "q.onnx", {"per_channel": True}, context)

    onnx.checker.check_model(onnx.load(report.output))
    assert any("Upgraded the model from opset 12 to 13" in w for w in report.warnings)
    assert not list(Path.cwd().glob("sym_shape_infer_temp.onnx"))


def test_failed_preprocessing_leaves_nothing_behind(cnn: Path, tmp_path: Path, monkeypatch) -> None:
    import onnxruntime.quantization.shape_inference as shape_inference

    from optistudio.core.passes.quantize import INT8_STATIC

    def failing_pre_process(*args, **kwargs):
        Path("sym_shape_infer_temp.onnx").write_bytes(b"temp")  # what ORT leaves in the cwd
        raise RuntimeError("Incomplete symbolic shape inference")

    monkeypatch.setattr(shape_inference, "quant_pre_process", failing_pre_process)
    context = _context(tmp_path, RandomBatches((2, 3, 16, 16), count=2))

    report = INT8_STATIC.run(cnn, tmp_path / "q.onnx", {}, context)

    assert any("Pre-processing failed" in w for w in report.warnings)
    assert not (tmp_path / "work" / "sym_shape_infer_temp.onnx").exists()
    assert not Path("sym_shape_infer_temp.onnx").exists()


def test_the_weights_really_get_the_range_the_cpu_calls_for(mlp: Path, tmp_path: Path) -> None:
    from optistudio.core.machine.environment import int8_choice

    out = tmp_path / "mlp.int8.onnx"
    run_int8_dynamic(mlp, out, Int8DynamicConfig(), _context(tmp_path))

    weights = [
        numpy_helper.to_array(init)
        for init in onnx.load(out).graph.initializer
        if init.data_type == TensorProto.INT8 and init.dims
    ]
    widest = max(int(np.abs(w.astype(np.int32)).max()) for w in weights)
    if int8_choice().reduce_range:  # x86 without VNNI/AMX (an AVX2-only CPU): 7-bit
        assert widest <= 64
    else:
        assert widest > 64
