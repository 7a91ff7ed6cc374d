"""A GRU state declared at batch 1 on its axis 1 (AECMOS's h0 [4, 1, 64] beside an open batch):
the batching jobs free it through a checked rewrite and serve each request its own answer, or
refuse in one sentence that names the state's axis (tests/recurrent_state_models.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from recurrent_state_models import build_state_model

from optistudio.core.batching.applicability import stack_axes
from optistudio.core.batching.fixed_batch import BatchRefused, batchable
from optistudio.core.batching.latency_profile import measure_latency_profile
from optistudio.core.batching.pipeline import Pipeline
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.data.inputs import requests_batch
from optistudio.core.data.model_inputs import ModelInputs
from optistudio.core.errors import InvalidSpec
from optistudio.core.model.intake import inspect_model


def test_read_by_its_dims_the_state_looks_like_a_fixed_batch(tmp_path: Path) -> None:
    info = inspect_model(build_state_model(tmp_path / "m.onnx"))

    with pytest.raises(InvalidSpec, match="'h0' has a fixed first dimension of 2"):
        stack_axes(info)


def test_the_pipeline_gives_each_request_its_own_state_answer(tmp_path: Path) -> None:
    original = build_state_model(tmp_path / "m.onnx")
    freed = batchable(original, cache=tmp_path / "cache")
    specs = inspect_model(freed.path).inputs
    requests = [requests_batch(specs, 1, seed=seed) for seed in range(3)]  # h0 random each
    alone = ort.InferenceSession(str(original))
    settings = BatchingSettings(max_batch_size=3, timeout_ms=500)

    with Pipeline.load(freed.path, settings) as pipeline:
        futures = [pipeline.submit(request) for request in requests]
        responses = [future.result(timeout=30) for future in futures]

    assert "'h0' on axis 1" in freed.note and "batch 3 matches 3 runs" in freed.note
    assert stack_axes(inspect_model(freed.path)).inputs == {"x": 0, "h0": 1}
    assert [r.batch_size for r in responses] == [3, 3, 3]
    for request, response in zip(requests, responses, strict=True):
        expected = alone.run(None, request)[0]  # [2]: the original squeezes its batch of 1
        assert response.outputs[0].shape == (1, 2)
        np.testing.assert_allclose(response.outputs[0][0], expected, rtol=1e-5, atol=1e-6)


def test_one_layer_beside_a_batch_fixed_at_1_frees_each_on_its_own_axis(tmp_path: Path) -> None:
    """h0 [1, 1, 5] beside x [1, 3, 4]: dim 0 of h0 is its one layer, not the batch."""
    original = build_state_model(tmp_path / "m.onnx", layers=1, batch=1)
    freed = batchable(original, cache=tmp_path / "cache")
    specs = inspect_model(freed.path).inputs
    requests = [requests_batch(specs, 1, seed=seed) for seed in range(2)]
    alone = ort.InferenceSession(str(original))

    with Pipeline.load(freed.path, BatchingSettings(max_batch_size=2, timeout_ms=500)) as pipe:
        responses = [f.result(timeout=30) for f in [pipe.submit(r) for r in requests]]

    assert {s.name: s.shape for s in specs} == {"x": ["batch", 3, 4], "h0": [1, "batch", 5]}
    for request, response in zip(requests, responses, strict=True):
        expected = alone.run(None, request)[0]
        np.testing.assert_allclose(response.outputs[0][0], expected, rtol=1e-5, atol=1e-6)


def test_a_graph_that_mixes_the_batch_is_refused_naming_the_state_axis(tmp_path: Path) -> None:
    original = build_state_model(tmp_path / "m.onnx", mixing=True)

    with pytest.raises(BatchRefused) as refused:
        batchable(original, cache=tmp_path / "cache")

    assert refused.value.message.startswith(
        "Dynamic batching does not apply to this model: input 'h0' is the initial_h of GRU "
        "'y_h', whose batch is axis 1 ([directions, batch, hidden]), declared at 1."
    )
    assert "not N runs at batch 1" in refused.value.message
    assert not list((tmp_path / "cache").glob("*.onnx"))


def test_the_batching_profile_runs_every_size_on_the_freed_state(tmp_path: Path) -> None:
    original = build_state_model(tmp_path / "m.onnx")

    profile = measure_latency_profile(
        original,
        max_batch_size=4,
        inputs=ModelInputs(shapes={"h0": [2, 1, 5]}, values={"h0": 0.0}),
        min_runs=2,
        min_seconds=0.0,
        probe_time_scale=0.25,  # what the profile does, not its figures
    )

    assert profile.batch_sizes == [1, 2, 4]
    assert "'h0' on axis 1" in profile.batched_rewrite and not profile.batch_refused
