"""The FP16 pass on tiny models run in ONNX Runtime: conversion, fallback, registry entry."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.data.datasets import SyntheticDataset
from optistudio.core.errors import PassFailed
from optistudio.core.model.intake import inspect_model
from optistudio.core.numerics.accuracy import accuracy_report
from optistudio.core.passes.base import PassContext, passes
from optistudio.core.passes.fp16 import FP16, NO_NATIVE_FP16, Fp16Config, run_fp16

RNG = np.random.default_rng(0)


def mlp(path: Path, *, first_layer: str = "MatMul", first_scale: float = 0.3) -> Path:
    """x[batch,16] -> layer1 -> Relu -> MatMul -> Add -> y[batch,8].

    layer1 is MatMul(x, W1), or Gemm(x, W1, alpha=1/first_scale): with first_scale 1e5 its
    weights lie far outside FP16's range (max 65504) while its outputs stay ordinary.
    """
    w1 = RNG.standard_normal((16, 32)) * first_scale
    layer1 = (
        helper.make_node("Gemm", ["x", "W1"], ["h"], alpha=1 / first_scale)
        if first_layer == "Gemm"
        else helper.make_node("MatMul", ["x", "W1"], ["h"])
    )
    weights = {"W1": w1, "W2": RNG.standard_normal((32, 8)) * 0.3, "b2": RNG.standard_normal(8)}
    graph = helper.make_graph(
        [
            layer1,
            helper.make_node("Relu", ["h"], ["r"]),
            helper.make_node("MatMul", ["r", "W2"], ["m"]),
            helper.make_node("Add", ["m", "b2"], ["y"]),
        ],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        initializer=[
            numpy_helper.from_array(value.astype(np.float32), name)
            for name, value in weights.items()
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def cosine_to(reference: Path, candidate: Path) -> float:
    data = SyntheticDataset(inspect_model(reference).inputs, samples=16, seed=7)
    return accuracy_report(reference, candidate, data).mean_cosine


@pytest.fixture
def context(tmp_path: Path) -> PassContext:
    return PassContext(work_dir=tmp_path / "work")


def test_mlp_converts_with_float32_io(tmp_path: Path, context: PassContext) -> None:
    model = mlp(tmp_path / "mlp.onnx")
    out = tmp_path / "mlp.fp16.onnx"

    report = run_fp16(model, out, Fp16Config(), context)

    converted = onnx.load(out)
    initializer_types = {t.name: t.data_type for t in converted.graph.initializer}
    info = inspect_model(out)  # runs onnx.checker: nodes must be in topological order
    assert set(initializer_types.values()) == {TensorProto.FLOAT16}
    assert [spec.dtype for spec in (*info.inputs, *info.outputs)] == ["float32", "float32"]
    assert cosine_to(model, out) > 0.99
    assert report.details["fp16_initializers"] == 3
    assert report.details["kept_in_fp32"]["op_types"] == []
    assert report.details["fallback"]["rounds"] == [
        {"round": 0, "kept_in_fp32": None, "cosine": pytest.approx(1, abs=1e-3)}
    ]


def test_weights_outside_fp16_range_trigger_fallback(tmp_path: Path, context: PassContext) -> None:
    model = mlp(tmp_path / "big.onnx", first_layer="Gemm", first_scale=1e5)
    plain = tmp_path / "plain.fp16.onnx"
    out = tmp_path / "big.fp16.onnx"

    run_fp16(model, plain, Fp16Config(auto_fallback=False), context)
    report = run_fp16(model, out, Fp16Config(), context)

    fallback = report.details["fallback"]
    assert cosine_to(model, plain) < 0.99
    assert report.details["kept_in_fp32"]["op_types"] == ["Gemm"]
    assert [r["kept_in_fp32"] for r in fallback["rounds"]] == [None, "Gemm"]
    assert fallback["cosine_before"] < 0.99 < 0.999 <= fallback["cosine_after"]
    assert cosine_to(model, out) > 0.999
    assert not (context.work_dir / "fp16_trial.onnx").exists()


def test_fallback_stops_after_max_rounds(tmp_path: Path, context: PassContext) -> None:
    model = mlp(tmp_path / "big.onnx", first_layer="Gemm", first_scale=1e5)

    report = run_fp16(model, tmp_path / "o.onnx", Fp16Config(max_fallback_rounds=0), context)

    assert report.details["kept_in_fp32"]["op_types"] == []
    assert any("still below the tolerance" in warning for warning in report.warnings)


def test_float16_io_when_not_keeping_io_types(tmp_path: Path, context: PassContext) -> None:
    model = mlp(tmp_path / "mlp.onnx")
    out = tmp_path / "o.onnx"

    run_fp16(model, out, Fp16Config(keep_io_types=False, auto_fallback=False), context)

    info = inspect_model(out)
    assert [spec.dtype for spec in (*info.inputs, *info.outputs)] == ["float16", "float16"]
    assert cosine_to(model, out) > 0.99


def test_user_blocked_op_types_stay_float32(tmp_path: Path, context: PassContext) -> None:
    model = mlp(tmp_path / "mlp.onnx")
    out = tmp_path / "o.onnx"

    config = Fp16Config(op_block_list=["Add"], auto_fallback=False)
    run_fp16(model, out, config, context)

    types = {t.name: t.data_type for t in onnx.load(out).graph.initializer}
    assert types["b2"] == TensorProto.FLOAT and types["W2"] == TensorProto.FLOAT16


def test_cpu_without_native_fp16_is_warned(
    tmp_path: Path, context: PassContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = mlp(tmp_path / "mlp.onnx")
    config = Fp16Config(auto_fallback=False)

    monkeypatch.setattr("optistudio.core.passes.fp16.isa_flags", lambda: ["avx2", "f16c"])
    without = run_fp16(model, tmp_path / "a.onnx", config, context).warnings
    monkeypatch.setattr("optistudio.core.passes.fp16.isa_flags", lambda: ["avx2", "avx512_fp16"])
    native = run_fp16(model, tmp_path / "b.onnx", config, context).warnings

    assert without == [NO_NATIVE_FP16] and native == []


def test_unreadable_model_fails_the_pass(tmp_path: Path, context: PassContext) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"\x08\x07garbage")

    with pytest.raises(PassFailed, match="Cannot read"):
        run_fp16(broken, tmp_path / "o.onnx", Fp16Config(), context)


def test_converter_failure_becomes_pass_failed(tmp_path: Path, context: PassContext) -> None:
    # A subgraph initializer shadowing an outer one trips the converter's assertion.
    shadow = numpy_helper.from_array(np.ones(2, np.float32), "W")
    branch = helper.make_graph(
        [helper.make_node("Add", ["x", "W"], ["z"])],
        "branch",
        [],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])],
        initializer=[shadow],
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        initializer=[shadow],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "if.onnx")

    with pytest.raises(PassFailed, match="FP16 conversion failed"):
        run_fp16(tmp_path / "if.onnx", tmp_path / "o.onnx", Fp16Config(), context)


def test_registered_and_runs_through_pass_info(tmp_path: Path, context: PassContext) -> None:
    model = mlp(tmp_path / "mlp.onnx")
    out = tmp_path / "o.onnx"

    report = passes.get("fp16").run(model, out, {"auto_fallback": False}, context)

    assert passes.get("fp16") == FP16 and FP16.produces_precision == "fp16"
    assert report.output == out and out.exists()
    assert cosine_to(model, out) > 0.99


def test_config_rejects_misspelt_options() -> None:
    with pytest.raises(ValueError, match="keep_io_type"):
        Fp16Config.model_validate({"keep_io_type": False})
