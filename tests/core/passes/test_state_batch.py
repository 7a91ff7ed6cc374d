"""A recurrent state input's batch axis read from the graph, freed, and checked (AECMOS-shaped
models built in code: tests/recurrent_state_models.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from recurrent_state_models import HIDDEN, LAYERS, build_state_model

from optistudio.core.errors import PassFailed
from optistudio.core.passes.state_batch import (
    check_state_batch,
    fixed_state_inputs,
    free_state_batch,
    state_batch_axes,
)

OPSETS = [pytest.param(9, id="opset9-attributes"), pytest.param(13, id="opset13-inputs")]


def _graph(path: Path) -> onnx.GraphProto:
    return onnx.load(str(path)).graph


def _samples(count: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(3)
    return [
        {
            "x": rng.normal(size=(1, 3, 4)).astype(np.float32),
            "h0": rng.normal(size=(LAYERS, 1, HIDDEN)).astype(np.float32),
        }
        for _ in range(count)
    ]


@pytest.mark.parametrize("opset", OPSETS)
def test_the_graph_says_the_state_is_batched_on_axis_1(tmp_path: Path, opset: int) -> None:
    graph = _graph(build_state_model(tmp_path / "m.onnx", opset=opset))

    state = state_batch_axes(graph)["h0"]

    assert (state.axis, state.slot, state.node) == (1, "initial_h", "GRU 'y_h'")
    assert [s.name for s in fixed_state_inputs(graph)] == ["h0"]
    assert "whose batch is axis 1 ([directions, batch, hidden])" in state.sentence()


def test_a_slice_along_the_batch_axis_says_nothing(tmp_path: Path) -> None:
    graph = _graph(build_state_model(tmp_path / "m.onnx", slice_axis=1))

    assert state_batch_axes(graph) == {}


def test_layout_1_puts_the_batch_first_which_free_batch_handles(tmp_path: Path) -> None:
    graph = _graph(build_state_model(tmp_path / "m.onnx", opset=14, layout=1, slice_axis=1))

    assert state_batch_axes(graph)["h0"].axis == 0
    assert fixed_state_inputs(graph) == []


@pytest.mark.parametrize("opset", OPSETS)
def test_the_rewrite_frees_the_axis_and_keeps_the_batch_in_the_squeeze(
    tmp_path: Path, opset: int
) -> None:
    original = build_state_model(tmp_path / "m.onnx", opset=opset)
    rewrite = free_state_batch(onnx.load(str(original)), "N")
    freed = tmp_path / "freed.onnx"
    onnx.save(rewrite.model, str(freed))
    samples = _samples(3)

    alone = [ort.InferenceSession(str(original)).run(None, s)[0] for s in samples]
    feeds = {
        "x": np.concatenate([s["x"] for s in samples]),
        "h0": np.concatenate([s["h0"] for s in samples], axis=1),
    }
    together = ort.InferenceSession(str(freed)).run(None, feeds)[0]

    h0 = next(v for v in rewrite.model.graph.input if v.name == "h0")
    assert [d.dim_value or d.dim_param for d in h0.type.tensor_type.shape.dim] == [2, "N", 5]
    assert any("(Squeeze): axes [1]" in edit for edit in rewrite.edits)
    assert alone[0].shape == (2,) and together.shape == (3, 2)
    np.testing.assert_allclose(together, np.stack(alone), rtol=1e-5, atol=1e-6)
    check = check_state_batch(original, freed, samples, {"x": 0, "h0": 1})
    assert check.axes == {"output": 0} and check.shapes == {"output": [1, 2]}


def test_a_graph_that_mixes_the_batch_fails_the_check(tmp_path: Path) -> None:
    original = build_state_model(tmp_path / "m.onnx", mixing=True)
    freed = tmp_path / "freed.onnx"
    onnx.save(free_state_batch(onnx.load(str(original)), "N").model, str(freed))

    with pytest.raises(PassFailed, match="output 'output' is not N runs at batch 1"):
        check_state_batch(original, freed, _samples(3), {"x": 0, "h0": 1})


def test_a_model_without_a_fixed_state_is_refused(tmp_path: Path) -> None:
    model = onnx.load(str(build_state_model(tmp_path / "m.onnx", slice_axis=1)))

    with pytest.raises(PassFailed, match="No recurrent state input"):
        free_state_batch(model, "N")
