from __future__ import annotations

from pathlib import Path

import pytest
from diagnostic_models import build_cnn, build_qdq_erf, quantize_cnn

from optistudio.core.diagnose.explain_int8 import explain_int8
from optistudio.core.diagnose.operator_profile import (
    NodeTime,
    OperatorProfile,
    OperatorProfileSpec,
    measure_operator_profile,
    op_family,
)
from optistudio.core.diagnose.profile_compare import compare_profiles

VNNI = ["avx2", "avx512f", "avx512_vnni"]
SPEC = OperatorProfileSpec(batch_size=2, runs=5, warmup_runs=2)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("explain")
    cnn = build_cnn(folder / "cnn.onnx")
    return {
        "fp32": cnn,
        "static": quantize_cnn(cnn, folder / "static.onnx", mode="static"),
        "dynamic": quantize_cnn(cnn, folder / "dynamic.onnx", mode="dynamic"),
        "conv2_excluded": quantize_cnn(
            cnn, folder / "partial.onnx", mode="static", exclude=["conv2"]
        ),
        "erf": build_qdq_erf(folder / "erf.onnx"),
    }


def _rules(path: Path, **kwargs: object) -> dict[str, object]:
    return {f.rule: f for f in explain_int8(path, isa=VNNI, **kwargs)}  # type: ignore[arg-type]


def test_dynamic_quantized_convolutions_are_flagged_with_their_profile_time(
    models: dict[str, Path], tmp_path: Path
) -> None:
    profile = measure_operator_profile(models["dynamic"], SPEC, work_dir=tmp_path)

    finding = _rules(models["dynamic"], profile=profile)["dynamic_conv"]

    assert finding.severity == "high"  # type: ignore[attr-defined]
    assert {"conv1_quant", "conv2_quant"} <= set(finding.nodes)  # type: ignore[attr-defined]
    assert finding.share and 0 < finding.share <= 1  # type: ignore[attr-defined]
    assert "int8_static" in finding.suggestion  # type: ignore[attr-defined]


def test_static_qdq_cnn_raises_neither_dynamic_nor_unfused_nor_float(
    models: dict[str, Path],
) -> None:
    rules = _rules(models["static"])

    assert not {"dynamic_conv", "unfused_qdq", "float_compute", "not_quantized"} & set(rules)


def test_an_op_without_integer_kernel_between_qdq_pairs_is_flagged(
    models: dict[str, Path],
) -> None:
    finding = _rules(models["erf"])["unfused_qdq"]

    assert finding.nodes == ["erf"]  # type: ignore[attr-defined]
    assert "Erf" in finding.title and "'erf'" in finding.suggestion  # type: ignore[attr-defined]


def test_a_convolution_left_in_float_is_named(models: dict[str, Path]) -> None:
    finding = _rules(models["conv2_excluded"])["float_compute"]

    assert finding.nodes == ["conv2"]  # type: ignore[attr-defined]


def test_convolutions_run_in_float_by_the_runtime_are_named(
    models: dict[str, Path], tmp_path: Path
) -> None:
    spec = SPEC.model_copy(update={"backend": "openvino"})
    profile = measure_operator_profile(models["dynamic"], spec, work_dir=tmp_path)

    finding = _rules(models["dynamic"], profile=profile)["float_compute"]

    assert set(finding.nodes) == {"conv1_quant", "conv2_quant"}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("flags", "fires"),
    [(["avx2", "fma"], True), (VNNI, False), (["avx2", "amx_int8"], False), ([], True)],
    ids=["avx2-only", "vnni", "amx", "no-flags"],
)
def test_cpu_without_int8_instructions(
    models: dict[str, Path], flags: list[str], fires: bool
) -> None:
    rules = {f.rule for f in explain_int8(models["static"], isa=flags)}

    assert ("cpu_int8" in rules) is fires


def test_a_float_model_is_said_not_to_be_quantized(models: dict[str, Path]) -> None:
    findings = explain_int8(models["fp32"], isa=VNNI)

    assert [f.rule for f in findings] == ["not_quantized"]


def _profile(nodes: list[tuple[str, str, float]]) -> OperatorProfile:
    total = sum(t for _, _, t in nodes)
    return OperatorProfile(
        model="m.onnx", sha256="0", inputs=["x"], outputs=["y"], backend="onnxruntime",
        batch_size=1, runs=1, quantized=True, node_total_us=total, profiled_ms=1.0,
        plain_ms=1.0, overhead=1.0, op_types=[],
        nodes=[
            NodeTime(node=name, graph_node=name, op_type=op, family=op_family(op),
                     precision="int8", time_us=t, share=t / total, calls=1)
            for name, op, t in nodes
        ],
    )  # fmt: skip


@pytest.mark.parametrize(("transpose_us", "fires"), [(30.0, True), (5.0, False)], ids=["30%", "5%"])
def test_layout_conversions_fire_above_their_share(
    models: dict[str, Path], transpose_us: float, fires: bool
) -> None:
    profile = _profile(
        [("conv1", "QLinearConv", 100 - transpose_us), ("t", "Transpose", transpose_us)]
    )

    assert ("layout" in _rules(models["static"], profile=profile)) is fires


@pytest.mark.parametrize(("q_us", "fires"), [(40.0, True), (10.0, False)], ids=["40%", "10%"])
def test_quantize_dequantize_time_fires_above_its_share(
    models: dict[str, Path], q_us: float, fires: bool
) -> None:
    profile = _profile([("conv1", "QLinearConv", 100 - q_us), ("x_q", "QuantizeLinear", q_us)])

    assert ("conversions" in _rules(models["static"], profile=profile)) is fires


def test_int8_slower_than_fp32_is_said_with_both_times(models: dict[str, Path]) -> None:
    fp32 = _profile([("conv1", "Conv", 50.0)])
    int8 = _profile([("conv1", "QLinearConv", 60.0), ("x_q", "QuantizeLinear", 10.0)])
    slow = compare_profiles(fp32, int8.model_copy(update={"plain_ms": 1.4}))
    fast = compare_profiles(fp32, int8.model_copy(update={"plain_ms": 0.5}))

    finding = _rules(models["static"], comparison=slow)["not_faster"]

    assert "1.400 ms vs 1.000 ms" in finding.title  # type: ignore[attr-defined]
    assert "Conv" in finding.detail  # type: ignore[attr-defined]
    assert "not_faster" not in _rules(models["static"], comparison=fast)


def test_findings_come_most_severe_first(models: dict[str, Path]) -> None:
    findings = explain_int8(models["static"], isa=["avx2"])

    assert [f.severity for f in findings] == sorted(
        (f.severity for f in findings), key=["high", "medium", "info"].index
    )
