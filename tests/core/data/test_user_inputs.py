"""Inputs follow what the user said: full shapes exactly, fixed values, arrays as given."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from audio_models import SAMPLE_RATE, build_audio_model

from optistudio.core.data.batch import batch_sizes_to_run, implied_batch_size
from optistudio.core.data.datasets import SyntheticDataset
from optistudio.core.data.inputs import (
    read_input_arrays,
    requests_batch,
    sample_dims,
    synthesize_inputs,
)
from optistudio.core.errors import DataMismatch, InvalidSpec
from optistudio.core.model.info import TensorSpec

AUDIO = [
    TensorSpec(name="input", dtype="float32", shape=["batch", "time"]),
    TensorSpec(name="state", dtype="float32", shape=[2, "batch", 16]),
    TensorSpec(name="sr", dtype="int64", shape=[]),
]
GIVEN = {"input": [3, 512], "state": [2, 3, 16]}


def shapes(feeds: dict[str, np.ndarray]) -> dict[str, tuple[int, ...]]:
    return {name: array.shape for name, array in feeds.items()}


def test_full_shapes_are_used_exactly_whatever_the_batch_size() -> None:
    feeds, warnings = synthesize_inputs(AUDIO, batch_size=8, overrides=GIVEN)

    assert shapes(feeds) == {"input": (3, 512), "state": (2, 3, 16), "sr": ()}
    assert warnings == []


def test_a_value_fills_its_input_in_the_input_dtype() -> None:
    feeds, _ = synthesize_inputs(AUDIO, batch_size=1, values={"sr": SAMPLE_RATE})

    assert feeds["sr"].dtype == np.int64 and feeds["sr"].shape == ()
    assert int(feeds["sr"]) == SAMPLE_RATE


def test_a_state_batched_on_axis_1_follows_the_batch_size() -> None:
    feeds, _ = synthesize_inputs(AUDIO, batch_size=4, values={"sr": SAMPLE_RATE})

    assert shapes(feeds)["state"] == (2, 4, 16)
    assert batch_sizes_to_run(AUDIO, shapes={}, requested=None, default=[1, 8]) == [1, 8]


def test_the_audio_model_runs_on_the_shapes_and_value_given(tmp_path: Path) -> None:
    session = ort.InferenceSession(
        str(build_audio_model(tmp_path / "audio.onnx")), providers=["CPUExecutionProvider"]
    )
    feeds, _ = synthesize_inputs(AUDIO, batch_size=8, overrides=GIVEN, values={"sr": 16000})

    state_out, checked = session.run(None, feeds)

    assert state_out.shape == (3, 3, 16)
    assert int(checked) == sum(range(SAMPLE_RATE))


@pytest.mark.parametrize(
    ("given", "requested", "expected"),
    [
        pytest.param(GIVEN, None, [3], id="all-shapes-imply-the-batch"),
        pytest.param(GIVEN, [3], [3], id="the-implied-batch-asked-for"),
        pytest.param({"state": [2, 5, 16]}, None, [5], id="the-state-sizes-the-audio-batch"),
    ],
)
def test_batch_sizes_with_full_shapes(given: dict, requested, expected: list[int]) -> None:
    assert batch_sizes_to_run(AUDIO, shapes=given, requested=requested, default=[1, 8]) == expected


def test_batch_sizes_that_contradict_the_full_shapes_are_refused() -> None:
    with pytest.raises(InvalidSpec, match=r"make the batch 3; batch sizes \[1, 8\]"):
        batch_sizes_to_run(AUDIO, shapes=GIVEN, requested=[1, 8], default=[1, 8])


def test_a_fixed_batch_past_dim_0_is_not_refused_when_shapes_are_given() -> None:
    fixed = [
        TensorSpec(name="input", dtype="float32", shape=[1, "time"]),
        TensorSpec(name="state", dtype="float32", shape=[2, 1, 16]),
    ]

    with pytest.raises(InvalidSpec, match="fixed batch size of 2 \\(input 'state'\\)"):
        batch_sizes_to_run(fixed, shapes={}, requested=[1], default=[1, 8])
    sizes = batch_sizes_to_run(fixed, shapes={"state": [2, 1, 16]}, requested=[1], default=[1])
    feeds, _ = synthesize_inputs(fixed, batch_size=1, overrides={"state": [2, 1, 16]})

    assert sizes == [1]
    assert shapes(feeds) == {"input": (1, 16), "state": (2, 1, 16)}


def test_a_full_shape_sizes_the_batch_of_inputs_sharing_its_batch_name() -> None:
    tokens = [
        TensorSpec(name="input_ids", dtype="int64", shape=["batch", "sequence"]),
        TensorSpec(name="attention_mask", dtype="int64", shape=["batch", "sequence"]),
    ]
    given = {"input_ids": [1, 128]}

    feeds, _ = synthesize_inputs(tokens, batch_size=8, overrides=given)

    assert shapes(feeds) == {"input_ids": (1, 128), "attention_mask": (1, 128)}
    assert batch_sizes_to_run(tokens, shapes=given, requested=None, default=[1, 8]) == [1]


def test_implied_batch_prefers_an_input_with_a_dynamic_batch() -> None:
    assert implied_batch_size(AUDIO, {"state": [2, 5, 16], "input": [5, 100]}) == 5
    assert implied_batch_size(AUDIO, {"state": [2, 6, 16]}) == 6


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param({"rate": 1.0}, r"unknown input 'rate'. Inputs: \['input', 'sr', 'state'\]"),
        pytest.param({"sr": 0.5}, "'sr' is int64; 0.5 is not a whole number"),
    ],
    ids=["unknown-input", "fraction-for-an-integer"],
)
def test_bad_values_are_named(values: dict, message: str) -> None:
    with pytest.raises(InvalidSpec, match=message):
        synthesize_inputs(AUDIO, batch_size=1, values=values)


def test_arrays_are_used_as_given_and_size_their_siblings(tmp_path: Path) -> None:
    audio = np.arange(2 * 40, dtype=np.float32).reshape(2, 40)
    np.savez(tmp_path / "in.npz", input=audio)
    arrays = read_input_arrays(tmp_path / "in.npz", AUDIO)

    feeds, _ = synthesize_inputs(AUDIO, batch_size=8, arrays=arrays)

    assert np.array_equal(feeds["input"], audio)
    assert shapes(feeds)["state"] == (2, 2, 16)  # batched on the audio's 'batch': 2, not 8


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        pytest.param({"audio": np.zeros((1, 4), np.float32)}, "names no input"),
        pytest.param({"input": np.zeros((1, 4), np.float64)}, "is float64 \\[1, 4\\]"),
        pytest.param(
            {"state": np.zeros((3, 1, 16), np.float32)}, "expects float32 \\[2, '\\?', 16"
        ),
    ],
    ids=["unknown-name", "wrong-dtype", "wrong-fixed-dim"],
)
def test_arrays_that_do_not_fit_are_refused(tmp_path: Path, arrays: dict, message: str) -> None:
    np.savez(tmp_path / "in.npz", **arrays)

    with pytest.raises(DataMismatch, match=message):
        read_input_arrays(tmp_path / "in.npz", AUDIO)


def test_sample_dims_are_the_datas_sizes_past_the_batch() -> None:
    lines = [TensorSpec(name="x", dtype="float32", shape=["batch", 3, "height", "width"])]

    dims = sample_dims(lines, {"x": np.zeros((1, 3, 48, 320), np.float32)})
    feeds, warnings = synthesize_inputs(lines, batch_size=2, dims=dims)

    assert dims == {"x.2": 48, "x.3": 320}
    assert shapes(feeds) == {"x": (2, 3, 48, 320)} and warnings == []


def test_requests_batch_grows_one_request_to_the_batch() -> None:
    specs = [TensorSpec(name="ids", dtype="int64", shape=["batch", "sequence"])]
    request = np.array([[5, 6, 7]], np.int64)

    grown = requests_batch(specs, 4, arrays={"ids": request})
    shaped = requests_batch(specs, 4, shapes={"ids": [1, 9]})

    assert grown["ids"].shape == (4, 3) and (grown["ids"] == request).all()
    assert shaped["ids"].shape == (4, 9)


def test_synthetic_dataset_keeps_the_given_shapes_and_values() -> None:
    dataset = SyntheticDataset(
        AUDIO, samples=4, batch_size=2, shapes={"state": [2, 2, 16]}, values={"sr": 16000}
    )

    batch = next(iter(dataset.batches()))

    assert shapes(batch) == {"input": (2, 16), "state": (2, 2, 16), "sr": ()}
    assert int(batch["sr"]) == 16000
