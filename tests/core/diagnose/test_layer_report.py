"""Per-layer rows on models as exported: unnamed nodes, shared names, long scoped names."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.data.datasets import SyntheticDataset
from optistudio.core.diagnose.layer_report import (
    SHORT_LABEL_CHARS,
    layer_error_rows,
    link_to_graph,
    node_labels,
    shorten,
)
from optistudio.core.model.intake import inspect_model
from optistudio.core.numerics.sensitivity import LayerError
from optistudio.core.passes.base import PassContext
from optistudio.core.passes.quantize import Int8StaticConfig, run_int8_static

LAYERS = 3


def unnamed_mlp(path: Path) -> Path:
    """(MatMul -> Div) x 3, every node unnamed, as some exporters write them."""
    rng = np.random.default_rng(0)
    weights = {
        f"w{i}": (rng.standard_normal((16, 16)) / 4).astype(np.float32) for i in range(LAYERS)
    }
    weights["two"] = np.array(2.0, np.float32)
    nodes, current = [], "x"
    for i in range(LAYERS):
        nodes += [
            helper.make_node("MatMul", [current, f"w{i}"], [f"m{i}"]),
            helper.make_node("Div", [f"m{i}", "two"], [f"d{i}"]),
        ]
        current = f"d{i}"
    graph = helper.make_graph(
        nodes,
        "unnamed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16])],
        [helper.make_tensor_value_info(current, TensorProto.FLOAT, ["n", 16])],
        initializer=[numpy_helper.from_array(value, name) for name, value in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    folder = tmp_path_factory.mktemp("layers")
    model = unnamed_mlp(folder / "unnamed.onnx")
    data = SyntheticDataset(inspect_model(model).inputs, samples=8, batch_size=4)
    context = PassContext(work_dir=folder / "work", calibration=data)
    quantized = run_int8_static(
        model, folder / "q.onnx", Int8StaticConfig(preprocess=False), context
    ).output
    return layer_error_rows(model, quantized, data, work_dir=folder / "rows")


def test_unnamed_nodes_each_get_their_own_label_index_and_op_type(rows: list[dict]) -> None:
    by_tensor = {row["tensor"]: row for row in rows}

    assert len({row["label"] for row in rows}) == len(rows) == 2 * LAYERS
    assert len({row["graph_index"] for row in rows}) == len(rows)
    assert by_tensor["m1"]["label"] == "MatMul #2" and by_tensor["m1"]["op_type"] == "MatMul"
    assert by_tensor["d1"]["label"] == "Div #3" and by_tensor["d1"]["op_type"] == "Div"
    assert by_tensor["m1"]["fed_by"] == ["Div #1"]
    assert all(row["node"] == "" for row in rows)


def test_shared_and_long_names_stay_distinct_and_keep_their_full_text() -> None:
    long = "/encoder/layer.11/attention/output/dense/MatMul_with_a_long_export_suffix"
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["a"], name="act"),
            helper.make_node("Relu", ["a"], ["b"], name="act"),
            helper.make_node("Split", ["b"], ["c", "d"], name=long, axis=1, num_outputs=2),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 2]) for name in "cd"],
    )
    errors = [
        _error(node, tensor)
        for node, tensor in [("act", "a"), ("act", "b"), (long, "c"), (long, "d")]
    ]

    linked = link_to_graph(errors, graph)

    assert node_labels(graph)[:2] == ["act #0", "act #1"]
    assert [row["label"] for row in linked] == ["act #0", "act #1", f"{long} (c)", f"{long} (d)"]
    assert linked[1]["fed_by"] == ["act #0"]
    short = linked[2]["short_label"]
    assert len(short) == SHORT_LABEL_CHARS and "…" in short and short.endswith("suffix (c)")
    assert shorten("conv1") == "conv1"


def _error(node: str, tensor: str) -> LayerError:
    return LayerError(
        node=node,
        op_type="",
        tensor=tensor,
        quantized_node=node,
        sqnr_db=30.0,
        cosine=0.99,
        noise_to_signal=0.001,
        noise_added=0.001,
        samples=4,
    )
