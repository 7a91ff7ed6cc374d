"""One rule for what the batching jobs free and for what the Batching page offers: a GRU state
declared at batch 1 on its axis 1 (AECMOS's h0 [4, 1, 64] beside an open batch) is batched
through the jobs' checked rewrite, so the page's pre-check must not refuse it for "a fixed first
dimension"; a state whose batch axis the graph does not show is refused by both
(tests/recurrent_state_models.py)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from recurrent_state_models import build_state_model

from optistudio.core.batching.applicability import stack_axes
from optistudio.core.batching.fixed_batch import batchable
from optistudio.core.batching.freeing import (
    batch_freeing,
    batching_problem,
    card_freeing,
)
from optistudio.core.errors import InvalidSpec
from optistudio.core.model.intake import inspect_model


def _graph(path: Path) -> onnx.GraphProto:
    return onnx.load(str(path), load_external_data=False).graph


def test_a_state_declared_at_1_on_its_axis_is_what_the_jobs_free(tmp_path: Path) -> None:
    model = build_state_model(tmp_path / "m.onnx")
    info = inspect_model(model)

    freeing = batch_freeing(_graph(model))
    freed = batchable(model, cache=tmp_path / "cache")  # the job's side of the same rule

    assert [(s.name, s.axis) for s in freeing.states] == [("h0", 1)] and freeing.fixed == ()
    assert batching_problem(info, freeing=freeing) is None
    assert "'h0' on axis 1" in freeing.state_note() and "'h0' on axis 1" in freed.note
    assert stack_axes(inspect_model(freed.path)).inputs == {"x": 0, "h0": 1}


def test_read_from_the_card_alone_the_state_looks_fixed(tmp_path: Path) -> None:
    info = inspect_model(build_state_model(tmp_path / "m.onnx"))

    problem = batching_problem(info, freeing=card_freeing(info))

    assert problem is not None and "'h0' has a fixed first dimension of 2" in problem


def test_a_state_whose_axis_the_graph_hides_is_refused_by_both(tmp_path: Path) -> None:
    """The Slice of h0 cuts axis 1, so the graph no longer says where the batch is."""
    model = build_state_model(tmp_path / "m.onnx", slice_axis=1)
    info = inspect_model(model)

    freeing = batch_freeing(_graph(model))
    problem = batching_problem(info, freeing=freeing)

    assert not freeing.needed
    assert problem is not None and "'h0' has a fixed first dimension of 2" in problem
    assert batchable(model, cache=tmp_path / "cache").path == model  # nothing freed
    with pytest.raises(InvalidSpec, match="fixed first dimension of 2"):
        stack_axes(info)


def test_batch_axes_the_user_set_are_taken_as_told(tmp_path: Path) -> None:
    model = build_state_model(tmp_path / "m.onnx")
    info = inspect_model(model)
    told = {"x": 0, "h0": None}  # h0 shared by the requests of a batch

    freeing = batch_freeing(_graph(model), told)

    assert not freeing.needed
    assert batching_problem(info, told, freeing) is None


@pytest.mark.parametrize("layers", [1, 2], ids=["one-layer", "two-layers"])
def test_a_batch_fixed_at_1_beside_a_state_frees_both(tmp_path: Path, layers: int) -> None:
    model = build_state_model(tmp_path / "m.onnx", batch=1, layers=layers)
    info = inspect_model(model)

    freeing = batch_freeing(_graph(model))

    assert freeing.fixed == ("x",) and [s.name for s in freeing.states] == ["h0"]
    assert batching_problem(info, freeing=freeing) is None
