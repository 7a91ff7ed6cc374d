"""A model whose batch is fixed at 1 is batched through its checked rewrite: the profile and a
measured load on a real pipeline, the reuse of the rewrite, and the refusals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.batching.fixed_batch import batchable, fixed_at_one
from optistudio.core.batching.latency_profile import measure_latency_profile
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.verify import measure_load
from optistudio.core.data.model_inputs import ModelInputs
from optistudio.core.errors import InvalidSpec
from optistudio.core.model.intake import inspect_model


def fixed_head(tmp_path: Path, *, mixing: bool = False) -> Path:
    """Conv, then Reshapes that pin the batch at 1 ([1, 3, 6, 4] and [1, -1, 6]), as YOLO-style
    heads are exported; `mixing` adds a ReduceMean over the batch."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Reshape", ["c", "split"], ["s"]),
        helper.make_node("Reshape", ["s", "rows"], ["r"]),
    ]
    nodes.append(
        helper.make_node("ReduceMean", ["r"], ["y"], axes=[0], keepdims=1)
        if mixing
        else helper.make_node("Identity", ["r"], ["y"])
    )
    inits = [
        numpy_helper.from_array(rng.standard_normal((18, 3, 1, 1)).astype(np.float32), "w"),
        numpy_helper.from_array(np.array([1, 3, 6, 4], dtype=np.int64), "split"),
        numpy_helper.from_array(np.array([1, -1, 6], dtype=np.int64), "rows"),
    ]
    graph = helper.make_graph(
        nodes,
        "head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12, 6])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / ("mixing.onnx" if mixing else "head.onnx")
    onnx.save(model, str(path))
    return path


def test_a_fixed_batch_is_freed_checked_once_and_reused(tmp_path: Path) -> None:
    model = fixed_head(tmp_path)
    assert fixed_at_one(inspect_model(model))

    first = batchable(model, cache=tmp_path / "cache")
    again = batchable(model, cache=tmp_path / "cache")

    assert first.path != model and first.path.parent == tmp_path / "cache"
    assert "batch is fixed at 1" in first.note and "2 node(s)" in first.note
    assert "batch 3 matches 3 runs at batch 1" in first.note
    assert again == first  # the same file and line, not made again
    assert inspect_model(first.path).inputs[0].shape[0] == "batch"


def test_a_free_batch_or_a_placed_batch_axis_is_batched_as_it_is(
    tmp_path: Path, tiny_model: Path
) -> None:
    assert batchable(tiny_model, cache=tmp_path).path == tiny_model
    assert not fixed_at_one(inspect_model(tiny_model))
    fixed = fixed_head(tmp_path)
    assert batchable(fixed, ModelInputs(batch_axes={"x": None}), cache=tmp_path).path == fixed
    assert not fixed_at_one(inspect_model(fixed), {"x": None})


def test_a_graph_that_mixes_the_batch_is_refused_naming_the_node(tmp_path: Path) -> None:
    with pytest.raises(InvalidSpec, match="batch is fixed at 1.*ReduceMean.*reduces over"):
        batchable(fixed_head(tmp_path, mixing=True), cache=tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("*.onnx"))  # nothing half-made is kept


def test_the_profile_and_a_served_load_run_the_fixed_batch_model(tmp_path: Path) -> None:
    model = fixed_head(tmp_path)
    profile = measure_latency_profile(
        model, max_batch_size=4, min_runs=3, min_seconds=0.05, probe_time_scale=0.25
    )
    assert profile.batch_sizes == [1, 2, 4]
    assert "batch is fixed at 1" in profile.batched_rewrite

    settings = BatchingSettings(max_batch_size=4, timeout_ms=5.0)
    run = measure_load(model, settings, rate=200.0, requests=60, seconds=None)
    assert run.result.completed == 60 and run.result.failed == 0 and not run.errors
    assert "batch is fixed at 1" in run.note
