from __future__ import annotations

from pathlib import Path

import pytest
from diagnostic_models import build_cnn, build_unloadable, quantize_cnn

from optistudio.core.diagnose.operator_profile import (
    OperatorProfile,
    OperatorProfileSpec,
    by_op_type,
    measure_operator_profile,
    op_family,
    parse_ort_profile,
)
from optistudio.core.diagnose.profile_compare import compare_profiles
from optistudio.core.errors import InvalidSpec, ModelLoadError, ModelRejected

SPEC = {"batch_size": 2, "runs": 6, "warmup_runs": 2}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("profiling")
    cnn = build_cnn(folder / "cnn.onnx")
    return {
        "fp32": cnn,
        "qdq": quantize_cnn(cnn, folder / "cnn_qdq.onnx", mode="static"),
        "other": build_cnn(folder / "other.onnx").rename(folder / "other.onnx"),
    }


@pytest.fixture(scope="module")
def profiles(models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    work = tmp_path_factory.mktemp("work")
    return {
        (name, backend): measure_operator_profile(
            models[name], OperatorProfileSpec(backend=backend, **SPEC), work_dir=work
        )
        for name in ("fp32", "qdq")
        for backend in ("onnxruntime", "openvino")
    }


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_fp32_profile_names_graph_nodes_and_runs_in_fp32(profiles: dict, backend: str) -> None:
    profile: OperatorProfile = profiles[("fp32", backend)]

    convs = [n for n in profile.nodes if n.family == "Conv"]
    assert {n.graph_node for n in convs} == {"conv1", "conv2"}
    assert all(n.precision == "fp32" for n in convs)
    assert abs(sum(n.share for n in profile.nodes) - 1.0) < 1e-6
    assert profile.nodes == sorted(profile.nodes, key=lambda n: -n.time_us)
    assert not profile.quantized and profile.plain_ms > 0 and profile.overhead > 0
    assert profile.input_shapes == {"x": [2, 3, 16, 16]}  # what the ms figure was measured at


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_qdq_profile_shows_int8_convolutions(profiles: dict, backend: str) -> None:
    profile: OperatorProfile = profiles[("qdq", backend)]

    convs = [n for n in profile.nodes if n.family == "Conv"]
    assert len(convs) == 2
    assert all(n.precision == "int8" for n in convs)
    assert profile.quantized
    expected_op = "QLinearConv" if backend == "onnxruntime" else "Convolution"
    assert {n.op_type for n in convs} == {expected_op}


def test_ort_calls_count_only_runs_after_warmup(profiles: dict) -> None:
    profile: OperatorProfile = profiles[("fp32", "onnxruntime")]

    assert {n.calls for n in profile.nodes} == {SPEC["runs"]}


def test_parse_ort_profile_sums_per_node_and_skips_warmup() -> None:
    def run(ts: int) -> list[dict]:
        return [
            {"cat": "Session", "name": "model_run", "ts": ts, "dur": 50},
            {
                "cat": "Node",
                "name": "conv1_kernel_time",
                "ts": ts + 1,
                "dur": 10 + ts // 100,
                "args": {"op_name": "QLinearConv", "input_type_shape": [{"uint8": [1, 3]}]},
            },
        ]

    events = run(0) + run(100) + run(200)

    nodes = parse_ort_profile(events, skip_runs=1)

    assert len(nodes) == 1
    assert (nodes[0].node, nodes[0].op_type, nodes[0].precision) == ("conv1", "QLinearConv", "int8")
    assert (nodes[0].per_run_us, nodes[0].calls, nodes[0].time_us) == ([11.0, 12.0], 2, 11.5)


def test_the_slowest_tenth_of_runs_is_dropped_from_a_node_time() -> None:
    events = []
    for run in range(10):
        ts = run * 100
        events.append({"cat": "Session", "name": "model_run", "ts": ts, "dur": 90})
        duration = 800 if run == 3 else 10  # one preempted run
        events.append(
            {"cat": "Node", "name": "flat_kernel_time", "ts": ts + 1, "dur": duration, "args": {}}
        )

    (node,) = parse_ort_profile(events)

    assert node.time_us == 10.0 and node.calls == 10


def test_parse_ort_profile_refuses_a_profile_without_runs() -> None:
    with pytest.raises(InvalidSpec, match="no inference"):
        parse_ort_profile([{"cat": "Session", "name": "model_run", "ts": 0, "dur": 1}], skip_runs=1)


def test_op_types_and_families_fold_precisions(profiles: dict) -> None:
    profile: OperatorProfile = profiles[("qdq", "onnxruntime")]

    rows = by_op_type(profile.nodes)

    assert rows[0].time_us >= rows[-1].time_us
    assert rows[0] == profile.op_types[0]
    assert op_family("QLinearConv") == op_family("ConvInteger") == op_family("Conv") == "Conv"
    assert op_family("DequantizeLinear") == op_family("FakeQuantize")


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_compare_fp32_with_its_int8_variant(profiles: dict, backend: str) -> None:
    comparison = compare_profiles(profiles[("fp32", backend)], profiles[("qdq", backend)])

    families = {row.family: row for row in comparison.families}
    assert families["Conv"].a_nodes == families["Conv"].b_nodes == 2
    assert families["Quantize/Dequantize"].change == "new"
    assert comparison.expected_precision == "int8"
    assert comparison.not_in_precision == []


def test_compare_names_nodes_not_in_the_precision_asked(profiles: dict) -> None:
    fp32 = profiles[("fp32", "onnxruntime")]

    comparison = compare_profiles(fp32, fp32, expected_precision="int8")

    assert {n.graph_node for n in comparison.not_in_precision} == {"conv1", "conv2"}


def test_comparing_profiles_of_different_models_is_refused(profiles: dict) -> None:
    fp32 = profiles[("fp32", "onnxruntime")]
    other = fp32.model_copy(update={"model": "bert.onnx", "inputs": ["input_ids"]})

    with pytest.raises(InvalidSpec, match="different models"):
        compare_profiles(fp32, other)


def test_comparing_profiles_at_different_batch_sizes_is_refused(profiles: dict) -> None:
    fp32 = profiles[("fp32", "onnxruntime")]

    with pytest.raises(InvalidSpec, match="batch sizes"):
        compare_profiles(fp32, fp32.model_copy(update={"batch_size": 8}))


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_profile_of_a_model_that_does_not_load_says_why(tmp_path: Path, backend: str) -> None:
    model = build_unloadable(tmp_path / "custom.onnx")

    with pytest.raises(ModelLoadError, match="could not load this model"):
        measure_operator_profile(
            model, OperatorProfileSpec(backend=backend, runs=1), work_dir=tmp_path
        )


def test_profile_of_a_file_that_is_not_a_model_is_rejected(tmp_path: Path) -> None:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model at all")

    with pytest.raises(ModelRejected):
        measure_operator_profile(junk, OperatorProfileSpec(runs=1), work_dir=tmp_path)


def test_profile_leaves_no_profiler_file_behind(models: dict[str, Path], tmp_path: Path) -> None:
    measure_operator_profile(models["fp32"], OperatorProfileSpec(runs=2), work_dir=tmp_path)

    assert list(tmp_path.glob("*.json")) == []
