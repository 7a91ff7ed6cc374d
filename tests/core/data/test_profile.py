"""Input profiles: what is proposed for real models' inputs, how a job's own settings win."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from audio_models import SAMPLE_RATE, build_audio_model

from optistudio.core.data.input_profile import (
    InputProfile,
    edited_input_profile,
    parse_batch_axes,
    propose_input_profile,
)
from optistudio.core.errors import InvalidSpec
from optistudio.core.measure.benchmark import BenchmarkSpec, run_benchmark
from optistudio.core.model.info import TensorSpec
from optistudio.core.model.intake import inspect_model
from optistudio.core.optimize.run import OptimizeSpec

QUICK = {"warmup_runs": 1, "min_runs": 3, "min_seconds": 0.0, "max_seconds": 1.0}


def spec(name: str, dtype: str, shape: list) -> TensorSpec:
    return TensorSpec(name=name, dtype=dtype, shape=shape)


def test_a_text_recognizer_with_question_mark_dims_gets_a_48x320_line():
    rec = [spec("x", "float32", ["?", 3, 48, "?"])]

    profile = propose_input_profile(rec)

    assert profile.shapes == {"x": [1, 3, 48, 320]}
    assert profile.batch_axes == {"x": 0}
    assert set(profile.guessed) == {"x.3"} and "text line 48 high" in profile.guessed["x.3"]
    assert profile.lines() == ["x: [batch, 3, 48, 320]"]


def test_a_paddle_image_input_with_negative_dims_gets_an_image_side():
    det = [spec("x", "float32", [-1, 3, -1, -1])]

    profile = propose_input_profile(det)

    assert profile.shapes == {"x": [1, 3, 224, 224]}
    assert set(profile.guessed) == {"x.2", "x.3"}


def test_token_inputs_share_their_named_sequence_and_a_sample_shape_is_not_a_guess():
    bert = [
        spec("input_ids", "int64", ["batch", "sequence"]),
        spec("attention_mask", "int64", ["batch", "sequence"]),
    ]

    guessed = propose_input_profile(bert)
    known = propose_input_profile(bert, known={"input_ids": [1, 64]})

    assert guessed.shapes == {"input_ids": [1, 128], "attention_mask": [1, 128]}
    assert set(guessed.guessed) == {"input_ids.1", "attention_mask.1"}
    assert known.shapes == {"input_ids": [1, 64], "attention_mask": [1, 64]}
    assert known.guessed == {}


def test_real_arrays_decide_their_sizes():
    rec = [spec("x", "float32", [None, 3, 48, None])]
    samples = {"x": np.zeros((4, 3, 48, 640), np.float32)}

    profile = propose_input_profile(rec, arrays=samples)

    assert profile.shapes == {"x": [1, 3, 48, 640]} and profile.guessed == {}


def test_a_stateful_audio_model_keeps_its_state_batched_on_axis_1_and_a_sample_rate(tmp_path):
    info = inspect_model(build_audio_model(tmp_path / "audio.onnx"))

    profile = propose_input_profile(info.inputs)

    assert profile.batch_axes == {"input": 0, "state": 1, "sr": None}
    assert profile.shapes == {"input": [1, 16], "state": [2, 1, 16], "sr": []}
    assert profile.values == {"sr": SAMPLE_RATE}
    assert "sample-rate" in profile.guessed["sr"]


def test_the_profile_runs_a_stateful_model_at_every_batch_size(tmp_path: Path):
    """Without a profile the sample rate is random and the model refuses it; under the
    proposed one the benchmark sweeps batches of audio and state together."""
    path = build_audio_model(tmp_path / "audio.onnx")
    info = inspect_model(path)
    job = BenchmarkSpec(batch_sizes=[1, 3], **QUICK)

    fed = job.model_copy(update=propose_input_profile(info.inputs).under(info.inputs, job))
    report = run_benchmark(path, fed, info=info)

    assert fed.values == {"sr": SAMPLE_RATE}
    assert [r.batch_size for r in report.results] == [1, 3]


def test_a_jobs_own_settings_win_over_the_profile():
    bert = [
        spec("input_ids", "int64", ["batch", "sequence"]),
        spec("attention_mask", "int64", ["batch", "sequence"]),
        spec("rate", "int64", []),
    ]
    profile = InputProfile(
        shapes={"input_ids": [1, 128], "attention_mask": [1, 128], "rate": []},
        batch_axes={"input_ids": 0, "attention_mask": 0, "rate": None},
        values={"rate": 8000},
    )

    plain = profile.under(bert, BenchmarkSpec())
    by_dim = profile.under(bert, BenchmarkSpec(dims={"sequence": 64}, values={"rate": 16000}))
    by_shape = profile.under(bert, BenchmarkSpec(shapes={"input_ids": [2, 32]}))

    assert plain == {
        "shapes": {},
        "dims": {"sequence": 128},
        "values": {"rate": 8000},
        "batch_axes": {},  # every axis is the inferred one: nothing to tell the job
    }
    assert by_dim["dims"] == {"sequence": 64} and by_dim["values"] == {"rate": 16000}
    # The job's full shape sizes 'sequence': the profile's 128 must not size the mask apart.
    assert by_shape["dims"] == {} and by_shape["shapes"] == {"input_ids": [2, 32]}
    assert profile.under(bert, BenchmarkSpec(inputs_file="feeds.npz")) == {}


def test_a_job_with_calibration_data_leaves_the_guessed_sizes_to_the_data():
    rec = [spec("x", "float32", [None, 3, 48, None])]
    profile = propose_input_profile(rec)

    class WithData(OptimizeSpec):
        data_path: str | None = None

        def brings_samples(self) -> bool:
            return bool(self.data_path)

    assert profile.under(rec, WithData())["dims"] == {"x.3": 320}
    assert profile.under(rec, WithData(data_path="lines.npz"))["dims"] == {}


def test_an_input_taken_off_the_batch_runs_at_its_full_shape():
    specs = [spec("x", "float32", ["batch", 8]), spec("table", "float32", ["rows", 4])]
    profile = edited_input_profile(
        specs,
        shapes={"x": [1, 8], "table": [5, 4]},
        batch_axes={"x": 0, "table": None},
        values={},
    )

    assert profile.under(specs, BenchmarkSpec())["shapes"] == {"table": [5, 4]}


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        ({"shapes": {"y": [1, 8]}}, "'y', which is no input"),
        ({"shapes": {"x": [1, 9]}}, "does not fit input 'x'"),
        ({"shapes": {"x": [1, 8, 1]}}, "rank 2"),
        ({"batch_axes": {"x": 2}}, "has 2 axes"),
        ({"batch_axes": {"y": 0}}, "'y', which is no input"),
        ({"values": {"n": 2.5}}, "not a whole number"),
    ],
)
def test_an_edited_profile_that_does_not_fit_the_model_says_why(edit, words):
    specs = [spec("x", "float32", ["batch", 8]), spec("n", "int64", [])]
    given = {"shapes": {}, "batch_axes": {}, "values": {}, **edit}

    with pytest.raises(InvalidSpec, match=words):
        edited_input_profile(specs, **given)


def test_an_edit_keeps_the_guesses_the_user_left_alone():
    rec = [spec("x", "float32", [None, 3, None, None])]
    before = propose_input_profile(rec)

    after = edited_input_profile(
        rec, shapes={"x": [1, 3, 640, 224]}, batch_axes={"x": 0}, values={}, before=before
    )

    assert set(before.guessed) == {"x.2", "x.3"} and set(after.guessed) == {"x.3"}


def test_batch_axis_flags_parse_and_refuse_nonsense():
    assert parse_batch_axes(["state=none", "x=0"]) == {"state": None, "x": 0}
    with pytest.raises(InvalidSpec, match="NAME=AXIS"):
        parse_batch_axes(["state"])


def test_a_recognizer_that_lists_its_characters_reads_48x320_lines():
    """PaddleOCR's recognizers declare [?, 3, ?, ?] and carry their alphabet as metadata."""
    rec = [spec("x", "float32", ["p2o.DynamicDimension.0", 3, "?", "p2o.DynamicDimension.1"])]

    profile = propose_input_profile(rec, metadata_keys=["character"])

    assert profile.shapes == {"x": [1, 3, 48, 320]}
    assert "text recognizer" in profile.guessed["x.2"]
