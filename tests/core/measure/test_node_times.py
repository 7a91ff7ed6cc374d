"""ONNX Runtime's profile read per node: runs told apart, medians and trimmed means, runtime
names mapped back to the file's nodes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.measure.node_times import GraphNames, parse_ort_profile


def _events(per_run_us: list[float], *, node: str = "conv1_token_9") -> list[dict]:
    """One 'model_run' per entry, each holding one kernel call of `node` that long."""
    events: list[dict] = []
    for run, duration in enumerate(per_run_us):
        start = 1000 * run
        events.append({"cat": "Session", "name": "model_run", "ts": start, "dur": 900})
        events.append(
            {
                "cat": "Node",
                "name": f"{node}_kernel_time",
                "ts": start + 10,
                "dur": duration,
                "args": {"op_name": "QLinearConv", "input_type_shape": [{"uint8": [1, 3]}]},
            }
        )
    return events


def test_a_node_reads_one_time_per_run_after_the_warm_up() -> None:
    (node,) = parse_ort_profile(_events([500.0, 10.0, 12.0, 11.0, 90.0]), skip_runs=1)

    assert node.per_run_us == [10.0, 12.0, 11.0, 90.0]
    assert node.median_us == pytest.approx(11.5)
    assert (node.op_type, node.precision, node.calls) == ("QLinearConv", "int8", 4)


def test_the_median_ignores_one_preempted_run_the_mean_of_few_runs_does_not() -> None:
    (node,) = parse_ort_profile(_events([10.0, 11.0, 10.0, 1000.0, 11.0]))

    assert node.median_us == pytest.approx(11.0)
    assert node.time_us > 100  # fewer than 10 runs: nothing trimmed


@pytest.fixture
def conv_relu(tmp_path: Path) -> Path:
    weight = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c1"], name="conv1"),
            helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        ],
        "conv_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("r1", TensorProto.FLOAT, [1, 4, 6, 6])],
        initializer=[weight],
    )
    path = tmp_path / "conv_relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize(
    ("runtime", "family", "graph_node"),
    [
        pytest.param("conv1", "Conv", "conv1", id="same-name"),
        pytest.param("conv1_token_9", "Conv", "conv1", id="token-suffix"),
        pytest.param("r1_nchwc", "Conv", "conv1", id="named-by-fused-output"),
        pytest.param("ReorderOutput", "Reorder", "", id="runtime-own-node"),
    ],
)
def test_runtime_names_map_back_to_the_file(
    conv_relu: Path, runtime: str, family: str, graph_node: str
) -> None:
    assert GraphNames(conv_relu).match(runtime, family) == graph_node
