"""A batch axis the user moves, and fixed values that are arrays, on a real stateful model.

The audio model of tests/audio_models.py with its state's batch dim left anonymous, as many
exports leave it: state [2, ?, 16] beside input [batch, time]. Nothing in the names says that
axis 1 is the state's batch; dim 0 (the layers) reads as a fixed batch of 2 until the batch
axis is moved, and then every job runs it, and the batching pipeline stacks requests on it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from audio_models import SAMPLE_RATE, build_anonymous_state_model

from optistudio.core.batching.applicability import stack_axes
from optistudio.core.batching.latency_profile import measure_latency_profile
from optistudio.core.batching.pipeline import Pipeline
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.data.batch import batch_sizes_to_run
from optistudio.core.data.input_profile import (
    InputProfile,
    edited_input_profile,
    parse_batch_axes,
    propose_input_profile,
)
from optistudio.core.data.inputs import (
    MAX_VALUE_ELEMENTS,
    ArrayValue,
    requests_batch,
    synthesize_inputs,
)
from optistudio.core.data.model_inputs import ModelInputs
from optistudio.core.errors import InvalidSpec
from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.core.model.intake import inspect_model

MOVED = {"state": 1}
RATE = {"sr": float(SAMPLE_RATE)}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_anonymous_state_model(tmp_path_factory.mktemp("moved") / "audio.onnx")


@pytest.fixture(scope="module")
def specs(model: Path):  # type: ignore[no-untyped-def]
    return inspect_model(model).inputs


def test_the_state_convention_proposes_axis_1_and_says_why(specs) -> None:  # type: ignore[no-untyped-def]
    profile = propose_input_profile(specs)

    assert profile.batch_axes == {"input": 0, "state": 1, "sr": None}
    assert profile.shapes["state"] == [2, 1, 16]
    assert "a state [layers, batch, hidden]" in profile.guessed["state.batch"]
    assert profile.moved_axes(specs) == MOVED
    assert profile.lines()[1] == "state: [2, batch, 16]"


def test_jobs_get_the_moved_axis_and_their_own_wins(specs) -> None:  # type: ignore[no-untyped-def]
    profile = propose_input_profile(specs)

    assert profile.under(specs, BenchmarkSpec())["batch_axes"] == MOVED
    own = BenchmarkSpec(batch_axes={"state": None}, shapes={"state": [2, 3, 16]})
    assert profile.under(specs, own)["batch_axes"] == {"state": None}


def test_without_the_axis_the_layers_read_as_a_fixed_batch(specs) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidSpec, match="fixed batch size of 2"):
        batch_sizes_to_run(specs, shapes={}, requested=[1, 3], default=[1])
    with pytest.raises(InvalidSpec, match="fixed batch of 2"):
        synthesize_inputs(specs, batch_size=3, values=RATE)


def test_with_the_axis_moved_every_batch_size_runs(model: Path, specs) -> None:  # type: ignore[no-untyped-def]
    sizes = batch_sizes_to_run(specs, shapes={}, requested=[1, 3], default=[1], axes=MOVED)
    feeds, _ = synthesize_inputs(specs, batch_size=3, values=RATE, batch_axes=MOVED)
    state_out, checked = ort.InferenceSession(str(model)).run(None, feeds)

    assert sizes == [1, 3]
    assert feeds["state"].shape == (2, 3, 16) and feeds["input"].shape[0] == 3
    assert state_out.shape == (3, 3, 16) and int(checked) == sum(range(SAMPLE_RATE))


def test_an_axis_is_checked_against_the_input(specs) -> None:  # type: ignore[no-untyped-def]
    given = {"shapes": {}, "values": {}}

    with pytest.raises(InvalidSpec, match="has 3 axes"):
        edited_input_profile(specs, batch_axes={"state": 3}, **given)
    edited = edited_input_profile(specs, shapes={"state": [2, 5, 16]}, batch_axes=MOVED, values={})
    assert edited.shapes["state"] == [2, 1, 16]  # a profile's shape is at batch 1
    assert parse_batch_axes(["state=1", "sr=none"]) == {"state": 1, "sr": None}
    with pytest.raises(InvalidSpec, match="NAME=AXIS or NAME=none"):
        parse_batch_axes(["state=one"])


def test_an_array_value_is_one_requests_and_repeats_along_the_batch(specs) -> None:  # type: ignore[no-untyped-def]
    initial = np.arange(32, dtype=np.float32).reshape(2, 1, 16)
    values = {**RATE, "state": ArrayValue.of("state", initial)}

    feeds, _ = synthesize_inputs(specs, batch_size=4, values=values, batch_axes=MOVED)

    assert feeds["state"].shape == (2, 4, 16)
    assert all(np.array_equal(feeds["state"][:, row : row + 1], initial) for row in range(4))


def test_an_array_value_is_stored_as_json_and_capped(specs) -> None:  # type: ignore[no-untyped-def]
    initial = np.linspace(0, 1, 32, dtype=np.float32).reshape(2, 1, 16)
    profile = edited_input_profile(
        specs,
        shapes=propose_input_profile(specs).shapes,
        batch_axes=MOVED,
        values={"state": ArrayValue.of("state", initial), **RATE},
    )
    back = InputProfile.model_validate_json(profile.model_dump_json())

    stored = back.values["state"]
    assert isinstance(stored, ArrayValue) and np.array_equal(stored.array(), initial)
    assert back.lines()[1] == "state: [2, batch, 16] = float32 [2, 1, 16] array"
    too_big = np.zeros(MAX_VALUE_ELEMENTS + 1, np.float32)
    with pytest.raises(InvalidSpec, match=f"at most {MAX_VALUE_ELEMENTS}.*--inputs"):
        ArrayValue.of("state", too_big)
    with pytest.raises(Exception, match="input 'state' expects float32"):
        edited_input_profile(
            specs,
            shapes={},
            batch_axes=MOVED,
            values={"state": ArrayValue.of("state", initial.astype(np.float64))},
        )


def test_batching_refuses_the_layers_then_stacks_on_the_moved_axis(model: Path) -> None:
    info = inspect_model(model)

    with pytest.raises(InvalidSpec, match="'state' has a fixed first dimension of 2"):
        stack_axes(info)
    axes = stack_axes(info, MOVED)
    assert axes.inputs == {"input": 0, "state": 1, "sr": None}
    assert axes.outputs == (1, None)  # state_out [3, batch, 16]; 'checked' is the batch's


def test_the_pipeline_splits_each_request_its_own_state(model: Path) -> None:
    """Three requests of one row each run as one batch of 3 stacked on the state's axis 1;
    each gets back the state_out it gets when run alone."""
    specs = inspect_model(model).inputs
    requests = [
        requests_batch(specs, 1, values=RATE, seed=seed, batch_axes=MOVED) for seed in range(3)
    ]
    alone = ort.InferenceSession(str(model))
    settings = BatchingSettings(max_batch_size=3, timeout_ms=500)

    with Pipeline.load(model, settings, batch_axes=MOVED) as pipeline:
        futures = [pipeline.submit(request) for request in requests]
        responses = [future.result(timeout=30) for future in futures]

    assert [r.batch_size for r in responses] == [3, 3, 3]
    for request, response in zip(requests, responses, strict=True):
        expected = alone.run(None, request)
        assert response.outputs[0].shape == (3, 1, 16)
        np.testing.assert_allclose(response.outputs[0], expected[0], rtol=1e-6)
        assert int(response.outputs[1]) == int(expected[1])


def test_a_batching_profile_runs_with_the_axis_moved(model: Path) -> None:
    with pytest.raises(InvalidSpec, match="fixed first dimension of 2"):
        measure_latency_profile(
            model, max_batch_size=2, inputs=ModelInputs(values=RATE), min_runs=2, min_seconds=0.0
        )

    profile = measure_latency_profile(
        model,
        max_batch_size=4,
        inputs=ModelInputs(values=RATE, batch_axes=MOVED),
        min_runs=2,
        min_seconds=0.0,
        probe_time_scale=0.25,  # what the profile does, not its figures
    )

    assert profile.batch_sizes == [1, 2, 4]
    assert all(ms > 0 for ms in profile.mean_ms)
