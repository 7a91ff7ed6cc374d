"""int8_nncf_ov: NNCF's INT8 on the model OpenVINO converted (what OpenVINO's users do), at
old and new opsets, as a pass, as Auto's candidate and through an optimization run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper, version_converter

from optistudio.core.backends import get_backend
from optistudio.core.backends.base import SessionOptions
from optistudio.core.errors import PassFailed
from optistudio.core.model.intake import inspect_model
from optistudio.core.optimize.recipes import (
    BUILTIN_RECIPES,
    auto_candidates,
    openvino_names,
    resolve_recipes,
)
from optistudio.core.optimize.run import NO_TASK, QUICK_COMPARISON, OptimizeSpec, optimize
from optistudio.core.passes.base import PassContext, passes
from optistudio.core.passes.nncf_openvino import (
    INT8_NNCF_OV,
    NncfOpenVinoConfig,
    openvino_types,
    run_int8_nncf_ov,
)
from optistudio.core.passes.nncf_quantize import NncfConfig, run_int8_nncf
from tests.core.passes.test_nncf import INPUT_SHAPE, RandomImages, build_cnn

COSINE_BUDGET = 0.98
BF16_FLAGS = ["avx512f", "avx512_bf16", "avx512_vnni"]
AVX2_FLAGS = ["avx2", "fma"]


def _quantize(model: Path, folder: Path, **config: object) -> tuple[Path, object]:
    context = PassContext(work_dir=folder, calibration=RandomImages(batches=2))
    options = NncfOpenVinoConfig.model_validate({"subset_size": 16} | config)
    report = run_int8_nncf_ov(model, folder / "out.onnx", options, context)
    return report.output, report


def _worst_cosine(model: Path, ir: Path) -> float:
    """The lowest per-sample cosine of the IR on OpenVINO against FP32 on ONNX Runtime, on
    the calibration inputs."""
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    loaded = get_backend("openvino").load(ir, SessionOptions(threads=1))
    worst = 1.0
    for batch in RandomImages(batches=2).batches():
        for row in batch["x"]:
            feeds = {"x": row[None]}
            a = session.run(None, feeds)[0].ravel().astype(np.float64)
            [b] = loaded.run(feeds)
            b = b.ravel().astype(np.float64)
            worst = min(worst, float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))))
    loaded.close()
    return worst


@pytest.mark.parametrize("opset", [9, 13], ids=["opset9", "opset13"])
def test_the_cnn_is_quantized_as_an_ir_that_openvino_runs_close_to_fp32(
    tmp_path: Path, opset: int
) -> None:
    model = build_cnn(tmp_path, opset=opset)

    ir, report = _quantize(model, tmp_path)

    assert ir.suffix == ".xml" and ir.with_suffix(".bin").is_file()
    assert report.details["opset"] == {"from": opset, "to": opset}  # OpenVINO took it as it is
    assert report.details["fake_quantize"] > 0
    assert report.details["quantized_nodes"]["Convolution"] == 2
    assert report.details["calibration"]["samples"] == 16
    assert report.warnings == []
    loaded = get_backend("openvino").load(ir, SessionOptions(threads=1))
    layers = loaded.details["layer_precisions"]
    loaded.close()
    assert layers.get("i8", 0) + layers.get("u8", 0) > 0
    assert _worst_cosine(model, ir) > COSINE_BUDGET


def build_legacy_concat(folder: Path) -> Path:
    """Two Conv -> Relu branches -> Concat with no axis, at opset 3 as early exporters wrote
    it (Concat-1's axis defaulted to 1): OpenVINO's frontend refuses Concat-1 without an axis,
    onnx.version_converter writes it at opset 13 with axis 1."""
    rng = np.random.default_rng(3)
    weight = (rng.standard_normal((8, 3, 3, 3)) / np.sqrt(27)).astype(np.float32)
    pads = [1, 1, 1, 1]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=pads),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Conv", ["x", "w"], ["d"], name="conv2", pads=pads, dilations=[1, 1]),
        helper.make_node("Relu", ["d"], ["s"], name="relu2"),
        helper.make_node("Concat", ["r", "s"], ["y"], name="concat"),
    ]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", *INPUT_SHAPE]),
        helper.make_tensor_value_info("w", TensorProto.FLOAT, weight.shape),  # IR 3 lists it
    ]
    graph = helper.make_graph(
        nodes,
        "legacy",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 16, 16, 16])],
        initializer=[numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 3)])
    model.ir_version = 3
    onnx.save(model, folder / "legacy.onnx")
    return folder / "legacy.onnx"


def test_a_model_openvino_refuses_at_its_old_opset_is_converted_first_and_says_so(
    tmp_path: Path,
) -> None:
    model = build_legacy_concat(tmp_path)

    ir, report = _quantize(model, tmp_path)

    assert report.details["opset"] == {"from": 3, "to": 13}
    [note] = report.warnings
    assert "opset 3" in note and "onnx.version_converter" in note and "Concat" in note
    assert "Check '" not in note  # OpenVINO's source locations are left out
    reference = tmp_path / "opset13.onnx"  # ONNX Runtime runs no Relu-1 either
    onnx.save(version_converter.convert_version(onnx.load(model), 13), reference)
    assert _worst_cosine(reference, ir) > COSINE_BUDGET


def test_the_onnx_graph_pass_converts_an_opset_9_model_and_says_so(tmp_path: Path) -> None:
    """NNCF's ONNX backend refuses opset < 10; int8_nncf converts such a model to opset 13."""
    model = build_cnn(tmp_path, opset=9)
    context = PassContext(work_dir=tmp_path, calibration=RandomImages(batches=1))

    report = run_int8_nncf(model, tmp_path / "out.onnx", NncfConfig(subset_size=8), context)

    assert report.details["opset"] == {"from": 9, "to": 13}
    assert report.details["quantized_nodes"]["Conv"] == 2
    assert any("opset 9 to 13 with onnx.version_converter" in w for w in report.warnings)


def test_a_model_openvino_cannot_convert_fails_with_its_reason(tmp_path: Path) -> None:
    node = helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example")
    graph = helper.make_graph(
        [node],
        "custom",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    opsets = [helper.make_opsetid("", 13), helper.make_opsetid("com.example", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets), tmp_path / "custom.onnx")

    with pytest.raises(PassFailed, match="OpenVINO could not convert this model: .*Frobnicate"):
        _quantize(tmp_path / "custom.onnx", tmp_path)


def test_ignored_types_in_onnx_names_keep_those_ops_in_float(tmp_path: Path) -> None:
    model = build_cnn(tmp_path, opset=13)

    _, report = _quantize(model, tmp_path, ignored_types=["Conv", "LSTM"])

    assert "Convolution" not in report.details["quantized_nodes"]
    [warning] = report.warnings
    assert "LSTM" in warning and "Convolution" in warning  # names the model's op types
    assert openvino_types(["Gemm", "MatMul", "Conv"]) == [
        "MatMul",
        "Convolution",
        "GroupConvolution",
    ]


def test_missing_calibration_fails_with_a_hint(tmp_path: Path) -> None:
    context = PassContext(work_dir=tmp_path)

    with pytest.raises(PassFailed, match="needs calibration data"):
        run_int8_nncf_ov(build_cnn(tmp_path), tmp_path / "o.onnx", NncfOpenVinoConfig(), context)


def test_the_pass_is_registered_through_its_entry_point() -> None:
    info = passes.get("int8_nncf_ov")

    assert info == INT8_NNCF_OV
    assert info.needs_calibration and info.produces_precision == "int8"
    assert info.config_class() is NncfOpenVinoConfig


def _names(recipes: list) -> set[str]:
    return {recipe.name for recipe in recipes}


def test_auto_offers_nncf_on_the_openvino_model_for_a_conv_model(tmp_path: Path) -> None:
    info = inspect_model(build_cnn(tmp_path, opset=9))

    on_openvino = _names(auto_candidates(info, target_backend="openvino", flags=AVX2_FLAGS))
    on_any = _names(
        resolve_recipes(
            ["auto"],
            info,
            target_backend="any",
            backends=["onnxruntime", "openvino"],
            flags=AVX2_FLAGS,
        )
    )
    on_onnxruntime = _names(auto_candidates(info, target_backend="onnxruntime"))

    assert {"int8_nncf_ov", "int8_nncf"} <= on_openvino
    assert {"int8_nncf_ov@openvino", "int8_nncf@openvino"} <= on_any
    assert not any("nncf" in name for name in on_onnxruntime)
    assert BUILTIN_RECIPES["int8_nncf_ov"].backend == "openvino"


def test_on_a_bf16_cpu_auto_also_times_the_int8_ir_with_the_rest_in_bf16(
    tmp_path: Path, tiny_model: Path
) -> None:
    cnn = inspect_model(build_cnn(tmp_path))
    mlp = inspect_model(tiny_model)

    assert {"int8_nncf_ov", "int8_nncf_ov_bf16"} <= set(openvino_names(cnn, flags=BF16_FLAGS))
    assert "int8_nncf_ov_bf16" not in openvino_names(cnn, flags=AVX2_FLAGS)
    assert "int8_nncf_ov_transformer" in openvino_names(mlp, flags=AVX2_FLAGS)
    assert BUILTIN_RECIPES["int8_nncf_ov_bf16"].steps == BUILTIN_RECIPES["int8_nncf_ov"].steps


def test_auto_times_the_ir_at_openvinos_own_default_precision_on_this_cpu(tmp_path: Path) -> None:
    """The anchor runs the rest at OpenVINO's default inference precision (no hint): one of
    Auto's int8_nncf_ov recipes asks for exactly that precision on this machine."""
    import openvino as ov

    default = ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name()
    wanted = {"bf16": "bf16", "f32": None}[default]  # None: the int8 hint, the rest in f32
    names = openvino_names(inspect_model(build_cnn(tmp_path)))

    assert any(
        BUILTIN_RECIPES[name].steps[0].step == "int8_nncf_ov"
        and BUILTIN_RECIPES[name].precision == wanted
        for name in names
    )


def test_the_optimization_run_makes_judges_and_times_the_ir_of_an_opset_9_model(
    tmp_path: Path,
) -> None:
    model = build_cnn(tmp_path, opset=9)
    spec = OptimizeSpec(
        recipes=["int8_nncf_ov"],
        target_backend="openvino",
        task=NO_TASK,  # judged by output cosine (its 4 outputs read as a regressor otherwise)
        comparison=QUICK_COMPARISON.model_copy(update={"min_seconds": 0.3}),
        accuracy_samples=8,
    )

    [variant] = optimize(model, spec, out_dir=tmp_path / "out").variants

    assert variant.error is None and variant.status == "made"
    assert variant.path and variant.path.endswith(".xml")
    assert Path(variant.path).with_suffix(".bin").is_file()
    assert (variant.backend, variant.precision) == ("openvino", "int8")
    assert variant.accuracy is not None and variant.accuracy.min_cosine > COSINE_BUDGET
    assert variant.within_budget
    assert variant.verdict is not None and variant.ratio_low <= variant.ratio <= variant.ratio_high


class _Rows:
    """Calibration source: seeded [1, 16] rows for the dynamic-rank Squeeze graph."""

    def batches(self):  # type: ignore[no-untyped-def]
        rng = np.random.default_rng(3)
        for _ in range(4):
            yield {"x": rng.standard_normal((1, 16)).astype(np.float32)}

    @property
    def description(self) -> str:
        return "4 random rows"


def test_a_graph_openvino_cannot_infer_dynamically_is_quantized_at_the_samples_shapes(
    tmp_path: Path,
) -> None:
    from tests.core.passes.exporter_graphs import dynamic_rank_squeeze

    model = dynamic_rank_squeeze(tmp_path / "squeeze.onnx")
    context = PassContext(work_dir=tmp_path, calibration=_Rows())
    options = NncfOpenVinoConfig.model_validate({"subset_size": 4})

    report = run_int8_nncf_ov(model, tmp_path / "out.onnx", options, context)

    assert report.output.suffix == ".xml" and report.output.is_file()
    assert any("reshaped to the calibration samples' shapes (x 1x16)" in w for w in report.warnings)


class ScaledImages(RandomImages):
    """Calibration rows whose scales differ tenfold: one row's extremes are not another's."""

    def batches(self) -> Iterator[dict[str, np.ndarray]]:
        for batch in super().batches():
            scales = np.linspace(1.0, 10.0, len(batch[self.name]), dtype=np.float32)
            yield {self.name: batch[self.name] * scales[:, None, None, None]}


def _input_range_top(ir: Path) -> float:
    """The upper input bound of the FakeQuantize on the model's input, as NNCF set it."""
    import openvino as ov

    for op in ov.Core().read_model(str(ir)).get_ordered_ops():
        source = op.input_value(0).get_node().get_type_name() if op.get_input_size() else ""
        if op.get_type_name() == "FakeQuantize" and source == "Parameter":
            return float(np.max(op.input_value(2).get_node().get_data()))
    raise AssertionError("no FakeQuantize on the input")


def test_global_activation_ranges_clip_no_calibration_sample_where_nncfs_mean_does(
    tmp_path: Path,
) -> None:
    model = build_cnn(tmp_path, opset=13)
    source = ScaledImages(batches=2)
    largest = max(float(np.abs(b["x"]).max()) for b in source.batches())
    tops = {}
    for ranges in ("mean", "global"):
        context = PassContext(work_dir=tmp_path / ranges, calibration=source)
        options = NncfOpenVinoConfig(subset_size=16, activation_ranges=ranges)
        report = run_int8_nncf_ov(model, tmp_path / ranges / "out.onnx", options, context)
        assert report.details["activation_ranges"] == ranges
        tops[ranges] = _input_range_top(report.output)

    assert tops["global"] >= largest * 0.999  # the widest row fits
    assert tops["mean"] < largest * 0.9  # the mean of the rows' ranges clips the widest
