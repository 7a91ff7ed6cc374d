"""int8_nncf: NNCF post-training quantization of a tiny CNN, run under OpenVINO and ONNX Runtime."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from pydantic import ValidationError

from optistudio.core.backends import get_backend
from optistudio.core.backends.base import SessionOptions
from optistudio.core.errors import DataMismatch, PassFailed
from optistudio.core.model.intake import inspect_model
from optistudio.core.optimize.recipes import BUILTIN_RECIPES, auto_candidates
from optistudio.core.passes.base import PassContext, passes
from optistudio.core.passes.nncf_quantize import (
    INT8_NNCF,
    OPENVINO_WARNING,
    NncfConfig,
    run_int8_nncf,
)

INPUT_SHAPE = (3, 16, 16)
SUBSET = 48


class RandomImages:
    """Calibration source: the same seeded random batches on every iteration."""

    def __init__(self, batches: int = 8, batch_size: int = 8, name: str = "x") -> None:
        self.count, self.batch_size, self.name = batches, batch_size, name
        self.iterations = 0

    def batches(self) -> Iterator[dict[str, np.ndarray]]:
        self.iterations += 1
        rng = np.random.default_rng(7)
        for _ in range(self.count):
            shape = (self.batch_size, *INPUT_SHAPE)
            yield {self.name: rng.standard_normal(shape).astype(np.float32)}

    @property
    def description(self) -> str:
        return f"{self.count} random batches"


def build_cnn(folder: Path, *, batch: int | str = "n", opset: int = 17) -> Path:
    """Conv -> Relu -> Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm, dynamic batch."""
    rng = np.random.default_rng(1)
    shapes = {"w1": (8, 3, 3, 3), "b1": (8,), "w2": (16, 8, 3, 3), "b2": (16,), "w3": (4, 16)}
    shapes["b3"] = (4,)
    weights = [
        numpy_helper.from_array(
            (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]) or 1)).astype(np.float32),
            name,
        )
        for name, shape in shapes.items()
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, *INPUT_SHAPE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])],
        initializer=weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, folder / "cnn.onnx")
    return folder / "cnn.onnx"


@pytest.fixture
def cnn(tmp_path: Path) -> Path:
    return build_cnn(tmp_path)


@pytest.fixture(scope="module")
def quantized(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, object, RandomImages]:
    """The CNN quantized once for the module (NNCF takes seconds)."""
    folder = tmp_path_factory.mktemp("nncf")
    model = build_cnn(folder)
    source = RandomImages()
    context = PassContext(work_dir=folder / "work", calibration=source)
    config = NncfConfig(subset_size=SUBSET)
    report = run_int8_nncf(model, folder / "int8.onnx", config, context)
    return model, folder / "int8.onnx", report, source


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(11).standard_normal((4, *INPUT_SHAPE)).astype(np.float32)}


def _ort(path: Path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def test_the_result_has_qdq_nodes_around_the_convolutions(quantized) -> None:
    _, out, report, _ = quantized

    ops = {node.op_type for node in onnx.load(out).graph.node}

    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    assert report.details["qdq_nodes"]["QuantizeLinear"] > 0
    assert report.details["quantized_nodes"]["Conv"] == 2
    assert report.details["preset"] == "performance"
    assert report.details["nncf_version"]
    assert OPENVINO_WARNING in report.warnings


def test_calibration_reads_subset_size_single_rows_and_restarts(quantized) -> None:
    _, _, report, source = quantized

    calibration = report.details["calibration"]

    assert calibration["samples"] == SUBSET
    assert calibration["split_batches"] is True
    assert source.iterations >= 1


@pytest.mark.parametrize("backend", ["openvino", "onnxruntime"])
def test_the_int8_model_stays_close_to_fp32(quantized, backend: str) -> None:
    model, out, _, _ = quantized
    feeds = _feeds()
    expected = _ort(model, feeds)

    if backend == "openvino":
        loaded = get_backend("openvino").load(out, SessionOptions())
        [actual] = loaded.run(feeds)
        loaded.close()
    else:
        actual = _ort(out, feeds)

    assert actual.shape == expected.shape
    assert _cosine(actual, expected) > 0.98


def build_concat_cnn(folder: Path) -> Path:
    """Conv -> two Conv branches -> Concat -> Conv: a Concat of quantized branches feeding a
    quantized Conv, as in PP-OCR's detector head (activations signed: no Relu)."""
    rng = np.random.default_rng(1)
    shapes = {"w1": (8, 3, 3, 3), "w2": (8, 8, 3, 3), "w3": (8, 8, 3, 3), "w4": (8, 16, 3, 3)}
    weights = [
        numpy_helper.from_array(
            (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32), name
        )
        for name, shape in shapes.items()
    ]
    pads = [1, 1, 1, 1]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="conv1", pads=pads),
        helper.make_node("Conv", ["a", "w2"], ["b"], name="branch1", pads=pads),
        helper.make_node("Conv", ["a", "w3"], ["c"], name="branch2", pads=pads),
        helper.make_node("Concat", ["b", "c"], ["d"], name="concat", axis=1),
        helper.make_node("Conv", ["d", "w4"], ["y"], name="head", pads=pads),
    ]
    graph = helper.make_graph(
        nodes,
        "concat_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", *INPUT_SHAPE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8, 16, 16])],
        initializer=weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, folder / "concat_cnn.onnx")
    return folder / "concat_cnn.onnx"


def test_a_concat_of_quantized_branches_runs_on_openvino_as_on_onnxruntime(
    tmp_path: Path,
) -> None:
    """OpenVINO's Core.read_model ran this QDQ graph with wrong Conv inputs (cosine 0.89 to
    ONNX Runtime here, 0.11 on PP-OCR's detector); the backend converts ONNX instead."""
    model = build_concat_cnn(tmp_path)
    context = PassContext(work_dir=tmp_path, calibration=RandomImages(batches=4))
    out = run_int8_nncf(model, tmp_path / "int8.onnx", NncfConfig(subset_size=32), context).output
    feeds = _feeds()

    loaded = get_backend("openvino").load(out, SessionOptions(threads=1))
    [on_openvino] = loaded.run(feeds)
    loaded.close()

    assert _cosine(on_openvino, _ort(out, feeds)) > 0.995
    assert _cosine(on_openvino, _ort(model, feeds)) > 0.98


def test_an_opset_12_model_gets_per_channel_weight_scales(tmp_path: Path) -> None:
    """Opset 10-12 Q/DQ has no axis: NNCF would give each Conv one weight scale."""
    model = build_cnn(tmp_path, opset=12)
    context = PassContext(work_dir=tmp_path, calibration=RandomImages(batches=1))

    report = run_int8_nncf(model, tmp_path / "out.onnx", NncfConfig(subset_size=8), context)

    conv_weights = _conv_weight_scales(onnx.load(report.output).graph)
    assert report.details["opset"] == {"from": 12, "to": 13}
    assert conv_weights == [(8, 8), (16, 16)]  # (filters, scales) of conv1 and conv2
    assert len(report.warnings) == 1  # OPENVINO_WARNING only


def _conv_weight_scales(graph: onnx.GraphProto) -> list[tuple[int, int]]:
    """(output channels, scales) of each 4-D weight a DequantizeLinear reads."""
    constants = {init.name: init for init in graph.initializer}
    pairs = []
    for node in graph.node:
        weight = constants.get(node.input[0]) if node.op_type == "DequantizeLinear" else None
        if weight is not None and len(weight.dims) == 4:
            pairs.append((weight.dims[0], int(np.prod(constants[node.input[1]].dims))))
    return pairs


def test_openvino_runs_the_quantized_layers_in_int8(quantized) -> None:
    _, out, _, _ = quantized

    loaded = get_backend("openvino").load(out, SessionOptions(precision="int8"))

    layers = loaded.details["layer_precisions"]
    loaded.close()
    assert "fallback" not in loaded.details
    assert layers.get("i8", 0) + layers.get("u8", 0) > 0


def test_missing_calibration_fails_with_a_hint(cnn: Path, tmp_path: Path) -> None:
    context = PassContext(work_dir=tmp_path)

    with pytest.raises(PassFailed, match="needs calibration data") as caught:
        run_int8_nncf(cnn, tmp_path / "out.onnx", NncfConfig(), context)

    assert caught.value.hint and "int8_dynamic" in caught.value.hint


def test_calibration_that_misses_an_input_is_a_data_mismatch(cnn: Path, tmp_path: Path) -> None:
    context = PassContext(work_dir=tmp_path, calibration=RandomImages(name="image"))

    with pytest.raises(DataMismatch, match="lacks input"):
        run_int8_nncf(cnn, tmp_path / "out.onnx", NncfConfig(subset_size=4), context)


def test_a_fixed_batch_model_is_fed_whole_batches(tmp_path: Path) -> None:
    model = build_cnn(tmp_path, batch=8)
    context = PassContext(work_dir=tmp_path, calibration=RandomImages(batches=3))

    report = run_int8_nncf(model, tmp_path / "out.onnx", NncfConfig(subset_size=300), context)

    assert report.details["calibration"] == {
        "samples": 3,
        "split_batches": False,
        "source": "3 random batches",
    }


class DoubleImages(RandomImages):
    """Calibration batches in float64, which the float32 model's ONNX Runtime session refuses."""

    def batches(self) -> Iterator[dict[str, np.ndarray]]:
        for batch in super().batches():
            yield {name: array.astype(np.float64) for name, array in batch.items()}


def test_an_nncf_error_becomes_pass_failed_with_a_hint(tmp_path: Path) -> None:
    model = build_cnn(tmp_path)
    context = PassContext(work_dir=tmp_path, calibration=DoubleImages(batches=1))

    with pytest.raises(PassFailed, match="NNCF could not quantize this model: ") as caught:
        run_int8_nncf(model, tmp_path / "out.onnx", NncfConfig(subset_size=4), context)

    assert caught.value.hint and "ignored_types" in caught.value.hint
    assert "\n" not in caught.value.message


def test_ignored_types_stay_float_and_unknown_ones_are_warned(cnn: Path, tmp_path: Path) -> None:
    context = PassContext(work_dir=tmp_path, calibration=RandomImages(batches=1))
    config = NncfConfig(subset_size=8, ignored_types=["Gemm", "LSTM"])

    report = run_int8_nncf(cnn, tmp_path / "out.onnx", config, context)

    assert "Gemm" not in report.details["quantized_nodes"]
    assert report.details["quantized_nodes"]["Conv"] == 2
    assert any("LSTM" in warning for warning in report.warnings)


def test_a_misspelt_option_is_rejected() -> None:
    with pytest.raises(ValidationError, match="subset"):
        NncfConfig.model_validate({"subset": 10})


def test_the_pass_is_registered_through_its_entry_point() -> None:
    info = passes.get("int8_nncf")

    assert info == INT8_NNCF
    assert info.needs_calibration and info.produces_precision == "int8"
    assert info.config_class() is NncfConfig


def test_auto_adds_nncf_for_cnns_only_when_targeting_openvino(cnn: Path) -> None:
    info = inspect_model(cnn)

    for_openvino = [r.name for r in auto_candidates(info, target_backend="openvino")]
    default = [r.name for r in auto_candidates(info)]

    assert "int8_nncf" in for_openvino
    assert "int8_nncf" not in default
    assert [s.step for s in BUILTIN_RECIPES["int8_nncf"].steps] == ["simplify", "int8_nncf"]


def test_auto_does_not_add_nncf_for_an_mlp(tiny_model: Path) -> None:
    names = [r.name for r in auto_candidates(inspect_model(tiny_model), target_backend="openvino")]

    assert "int8_nncf" not in names
