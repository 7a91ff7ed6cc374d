"""int8_placed on a tiny residual CNN: what it writes, the float nodes it keeps float, how each
runtime time reaches a node. Which nodes pay is this machine's affair and never asserted."""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.data.datasets import SyntheticDataset
from optistudio.core.model.intake import inspect_model
from optistudio.core.passes.base import PassContext, passes
from optistudio.core.passes.float_nodes import keep_float, reads_dequantized
from optistudio.core.passes.int8_placed import (
    INT8_PLACED,
    Int8PlacedConfig,
    quantize_placed,
    run_int8_placed,
)
from optistudio.core.passes.placement_times import (
    candidates,
    node_costs,
    quantized_nodes,
    spread_conversions,
)
from optistudio.core.passes.prepare import GraphNotApplicable, prepare_for_quantizer
from optistudio.core.passes.quantize import Int8StaticConfig, run_int8_static

DQ, Q = "DequantizeLinear", "QuantizeLinear"


def _residual_cnn(path: Path) -> Path:
    """conv1 -> relu1 -> conv2 -> add(+relu1) -> gap -> flat: [n, 3, 16, 16] -> [n, 8]."""
    rng = np.random.default_rng(0)
    weights = {
        "w1": rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3,
        "b1": rng.standard_normal(8).astype(np.float32) * 0.1,
        "w2": rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.3,
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["s"], name="add"),
        helper.make_node("GlobalAveragePool", ["s"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["y"], name="flat"),
    ]
    graph = helper.make_graph(
        nodes,
        "residual_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])],
        initializer=[numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def _context(work: Path, model: Path) -> PassContext:
    data = SyntheticDataset(inspect_model(model).inputs, samples=16, batch_size=4)
    return PassContext(work_dir=work, calibration=data)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("placed")
    model = _residual_cnn(folder / "cnn.onnx")
    return prepare_for_quantizer(model, folder / "prepared").path


@pytest.fixture(scope="module")
def full_int8(prepared: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("full")
    config = Int8StaticConfig(preprocess=False)
    return run_int8_static(prepared, folder / "q.onnx", config, _context(folder, prepared)).output


def _node(graph: onnx.GraphProto, name: str) -> onnx.NodeProto:
    return next(node for node in graph.node if node.name == name)


def _runs(path: Path) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"x": np.ones((2, 3, 16, 16), np.float32)})
    return y


def _quantized_reader_of_tensor(graph: onnx.GraphProto, tensor: str, excluded: set[str]) -> bool:
    """Whether a node outside `excluded` reads the DQ of a Q on `tensor` (a needed boundary)."""
    qs = [n for n in graph.node if n.op_type == Q and n.input[0] == tensor]
    dq_outs = {o for n in graph.node if n.op_type == DQ for q in qs if q.output[0] in n.input
               for o in n.output}  # fmt: skip
    return any(n.name not in excluded and dq_outs.intersection(n.input) for n in graph.node)


def assert_float_kept(graph: onnx.GraphProto, excluded: set[str]) -> None:
    """No excluded node reads a DQ output, and a Q on an excluded node's output exists only
    where an INT8 node reads its DQ."""
    for name in excluded:
        node = _node(graph, name)
        assert not reads_dequantized(graph, name), f"{name} reads a DequantizeLinear output"
        for out in node.output:
            quantized_out = any(n.op_type == Q and n.input[0] == out for n in graph.node)
            assert not quantized_out or _quantized_reader_of_tensor(graph, out, excluded), out


def test_onnx_runtime_feeds_an_excluded_node_dequantized_and_keep_float_undoes_it(
    prepared: Path, tmp_path: Path
) -> None:
    config = Int8StaticConfig(preprocess=False, nodes_to_exclude=["conv2"])
    made = run_int8_static(prepared, tmp_path / "q.onnx", config, _context(tmp_path, prepared))
    proto = onnx.load(made.output)
    assert reads_dequantized(proto.graph, "conv2")  # the quantizer's shared Q/DQ pair

    rewired = keep_float(proto, {"conv2"})

    assert rewired >= 1
    assert_float_kept(proto.graph, {"conv2"})
    assert reads_dequantized(proto.graph, "conv1")
    onnx.checker.check_model(proto, full_check=True)
    path = tmp_path / "kept.onnx"
    onnx.save(proto, path)
    assert _runs(path).shape == (2, 8)


@pytest.mark.parametrize(
    "fp32_nodes",
    [
        pytest.param(["conv2"], id="a-middle-conv"),
        pytest.param(["add", "gap", "flat"], id="the-tail-up-to-the-graph-output"),
        pytest.param(["conv1", "relu1"], id="the-first-conv-and-its-relu"),
    ],
)
def test_the_placed_model_is_valid_and_its_fp32_nodes_compute_in_float(
    prepared: Path, tmp_path: Path, fp32_nodes: list[str]
) -> None:
    out = tmp_path / "placed.onnx"

    notes = quantize_placed(
        prepared, out, fp32_nodes, Int8PlacedConfig(), _context(tmp_path, prepared)
    )

    proto = onnx.load(out)
    onnx.checker.check_model(proto, full_check=True)
    present = {node.name for node in proto.graph.node}
    assert_float_kept(proto.graph, set(fp32_nodes) & present)
    assert set(quantized_nodes(proto.graph)).isdisjoint(fp32_nodes)
    assert quantized_nodes(proto.graph), "some node is still INT8"
    assert np.isfinite(_runs(out)).all()
    assert all(isinstance(note, str) for note in notes)


def test_a_float_tail_writes_the_graph_output_itself(prepared: Path, tmp_path: Path) -> None:
    out = tmp_path / "placed.onnx"

    quantize_placed(
        prepared, out, ["add", "gap", "flat"], Int8PlacedConfig(), _context(tmp_path, prepared)
    )

    graph = onnx.load(out).graph
    assert _node(graph, "flat").output[0] == "y"
    assert not [n for n in graph.node if n.op_type in (Q, DQ) and "y" in n.output]


def test_each_conversion_reaches_the_quantized_nodes_it_serves(full_int8: Path) -> None:
    graph = onnx.load(full_int8).graph
    quantized = set(quantized_nodes(graph))
    input_q = next(n for n in graph.node if n.op_type == Q and n.input[0] == "x")
    served = [
        reader.name
        for dq in graph.node
        if dq.op_type == DQ and input_q.output[0] in dq.input
        for reader in graph.node
        if dq.output[0] in reader.input and reader.name in quantized
    ]
    assert served  # the input's Q serves conv1's INT8
    times = {input_q.name: 12.0, "conv1": 5.0}

    spread = spread_conversions(times, graph)

    assert sum(spread.values()) == pytest.approx(17.0)
    assert input_q.name not in spread
    for name in served:
        assert spread[name] >= 12.0 / len(served)


def test_candidates_are_the_float_graph_nodes_the_quantizer_took(
    prepared: Path, full_int8: Path
) -> None:
    float_graph, int8_graph = onnx.load(prepared).graph, onnx.load(full_int8).graph
    float_names = [node.name for node in float_graph.node]

    found = candidates(float_graph, int8_graph, {"conv1": 3.0}, {"conv1": 1.0})

    names = [cost.name for cost in found]
    assert set(quantized_nodes(int8_graph)) <= set(names) <= set(float_names)
    assert names == [name for name in float_names if name in names]  # graph order
    by_name = {cost.name: cost for cost in found}
    assert (by_name["conv1"].fp32_us, by_name["conv1"].int8_us) == (3.0, 1.0)
    assert by_name["conv1"].producer is None  # it reads the graph input
    assert all(c.producer in by_name for c in found if c.producer is not None)


def test_node_costs_time_every_candidate_of_the_tiny_cnn(
    prepared: Path, full_int8: Path, tmp_path: Path
) -> None:
    feeds = [{"x": np.ones((2, 3, 16, 16), np.float32)}]

    costs = node_costs(prepared, full_int8, feeds, runs=3, warmup=1, work_dir=tmp_path)

    by_name = {cost.name: cost for cost in costs}
    assert by_name["conv1"].fp32_us > 0 and by_name["conv1"].int8_us > 0
    assert by_name["conv2"].fp32_us > 0 and by_name["conv2"].int8_us > 0


def test_the_pass_writes_a_placed_model_or_says_why_not(tmp_path: Path) -> None:
    model = _residual_cnn(tmp_path / "cnn.onnx")
    out = tmp_path / "out.onnx"
    config = Int8PlacedConfig(timing_runs=3, warmup_runs=1, timing_batches=1)

    try:
        report = run_int8_placed(model, out, config, _context(tmp_path / "work", model))
    except GraphNotApplicable as exc:  # which nodes pay is this machine's: both outcomes hold
        assert exc.message.startswith("Not applicable to this graph: ")
        assert not out.exists()
        return
    proto = onnx.load(out)
    onnx.checker.check_model(proto, full_check=True)
    fp32 = report.details["fp32_nodes"]
    assert fp32 and report.details["int8_nodes"] >= 1
    assert report.warnings[0].startswith(f"INT8 kept on {report.details['int8_nodes']} of ")
    present = {node.name for node in proto.graph.node}
    assert_float_kept(proto.graph, set(fp32) & present)
    assert np.isfinite(_runs(out)).all()


def test_int8_placed_is_registered_through_its_entry_point() -> None:
    points = {point.name: point for point in entry_points(group="optistudio.passes")}

    assert points["int8_placed"].load() is INT8_PLACED
    assert passes.get("int8_placed").needs_calibration


def test_a_misspelt_option_is_refused() -> None:
    with pytest.raises(ValueError, match="marign"):
        Int8PlacedConfig.model_validate({"marign": 0.2})
