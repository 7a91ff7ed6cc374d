"""Stored input profiles: proposed at intake, shared by variants, under every job a worker runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from audio_models import SAMPLE_RATE, build_anonymous_state_model, build_audio_model
from sized_models import build_blocks

from optistudio.core.data.input_profile import InputProfile
from optistudio.core.data.probe import unchecked_guesses
from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.core.model.info import ModelInfo, TensorSpec
from optistudio.db.models import JobKind, JobStatus
from optistudio.services.catalog import add_model_file
from optistudio.services.input_profiles import load_profile, proposed_profile, save_profile
from optistudio.workers import outcome
from tests.workers.conftest import finished_job

QUICK = {"warmup_runs": 1, "min_runs": 3, "min_seconds": 0.0, "max_seconds": 1.0}


def test_a_sample_that_needs_its_shape_is_proposed_at_it_without_guesses() -> None:
    info = ModelInfo(
        sha256="0" * 64,
        size_bytes=1,
        ir_version=8,
        opsets={"": 17},
        op_histogram={},
        node_count=0,
        parameter_count=0,
        inputs=[TensorSpec(name="x", dtype="float32", shape=["n", 3, "h", "w"])],
        outputs=[],
    )

    sample = proposed_profile(info, sample="rapidocr_det")
    upload = proposed_profile(info)

    assert sample.shapes == {"x": [1, 3, 640, 640]} and sample.guessed == {}
    assert upload.shapes == {"x": [1, 3, 224, 224]} and set(upload.guessed) == {"x.2", "x.3"}


@pytest.fixture
def audio(db_factory, app_settings, tmp_path: Path) -> int:  # type: ignore[no-untyped-def]
    path = build_audio_model(tmp_path / "audio.onnx")
    return add_model_file(db_factory, app_settings, path, name="audio").model_id


def run_benchmark_job(factory, model_id: int, spec: BenchmarkSpec):  # type: ignore[no-untyped-def]
    job = finished_job(factory, JobKind.benchmark, model_id, spec)
    return job.status, job.message, job.spec


def test_a_job_runs_at_the_stored_profile_and_records_it(db_factory, audio) -> None:  # type: ignore[no-untyped-def]
    """The audio model needs its sample rate: the proposed profile gives it, every job uses
    it and the job row records the settings it ran with."""
    assert load_profile(db_factory, audio).values == {"sr": SAMPLE_RATE}

    status, message, spec = run_benchmark_job(
        db_factory, audio, BenchmarkSpec(batch_sizes=[1, 2], **QUICK)
    )

    assert status == JobStatus.succeeded, message
    assert spec["values"] == {"sr": SAMPLE_RATE}
    assert spec["dims"] == {"time": 16}


def test_an_edited_profile_is_what_the_next_job_runs(db_factory, audio) -> None:  # type: ignore[no-untyped-def]
    profile = load_profile(db_factory, audio)
    edited = profile.model_copy(update={"values": {"sr": 8000}})
    save_profile(db_factory, audio, edited)

    status, message, spec = run_benchmark_job(
        db_factory, audio, BenchmarkSpec(batch_sizes=[1], **QUICK)
    )

    # The model checks its rate: 8000 cannot reshape 16000 samples, so the job fails saying so.
    assert status == JobStatus.failed
    assert spec["values"] == {"sr": 8000}
    assert load_profile(db_factory, audio) == edited


def test_a_variant_is_fed_like_its_original(db_factory, app_settings, audio, tmp_path) -> None:  # type: ignore[no-untyped-def]
    copy = build_audio_model(tmp_path / "variant.onnx", batch=1)
    variant = add_model_file(
        db_factory, app_settings, copy, name="audio-b1", origin="variant", parent_id=audio
    ).model_id
    edited = InputProfile(
        shapes={"input": [1, 32], "state": [2, 1, 16], "sr": []},
        batch_axes={"input": 0, "state": 1, "sr": None},
        values={"sr": SAMPLE_RATE},
    )

    stored_on = save_profile(db_factory, variant, edited)

    assert stored_on == audio
    assert load_profile(db_factory, variant) == load_profile(db_factory, audio) == edited


def test_a_job_fed_through_jobwork_gets_the_moved_batch_axis(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path: Path
) -> None:
    """A state [2, ?, 16]: intake proposes its batch on axis 1 (the state convention); the
    worker lays that under the job, which then runs batches of 1 and 3 and records the axis."""
    path = build_anonymous_state_model(tmp_path / "moved.onnx")
    model_id = add_model_file(db_factory, app_settings, path, name="moved").model_id
    assert load_profile(db_factory, model_id).batch_axes["state"] == 1

    status, message, spec = run_benchmark_job(
        db_factory, model_id, BenchmarkSpec(batch_sizes=[1, 3], **QUICK)
    )

    assert status == JobStatus.succeeded, message
    assert spec["batch_axes"] == {"state": 1} and spec["values"] == {"sr": SAMPLE_RATE}


def test_a_job_without_the_moved_axis_is_refused_in_one_sentence(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path: Path
) -> None:
    path = build_anonymous_state_model(tmp_path / "moved.onnx")
    model_id = add_model_file(db_factory, app_settings, path, name="moved").model_id
    profile = load_profile(db_factory, model_id)
    save_profile(db_factory, model_id, profile.model_copy(update={"batch_axes": {"state": 0}}))

    status, message, spec = run_benchmark_job(
        db_factory, model_id, BenchmarkSpec(batch_sizes=[1, 3], **QUICK)
    )

    assert status == JobStatus.failed
    assert "fixed batch size of 2 (input 'state')" in message


def test_a_stored_guess_that_does_not_run_is_checked_and_replaced_before_the_job(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path: Path
) -> None:
    """Intake proposed 224 x 224 without running the model (sides must be multiples of 64):
    the worker checks it by a run first, stores the 256 x 256 that ran, and the job runs."""
    path = build_blocks(tmp_path / "k64.onnx", 64)
    model_id = add_model_file(db_factory, app_settings, path, name="k64").model_id
    assert unchecked_guesses(load_profile(db_factory, model_id)) == ["x.2", "x.3"]

    status, message, spec = run_benchmark_job(
        db_factory, model_id, BenchmarkSpec(batch_sizes=[1, 2], **QUICK)
    )

    assert status == JobStatus.succeeded, message
    assert spec["dims"] == {"x.2": 256, "x.3": 256}
    stored = load_profile(db_factory, model_id)
    assert stored.shapes == {"x": [1, 1, 256, 256]} and unchecked_guesses(stored) == []


def test_a_checked_profile_is_not_checked_again(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = build_blocks(tmp_path / "k64.onnx", 64)
    model_id = add_model_file(db_factory, app_settings, path, name="k64").model_id
    run_benchmark_job(db_factory, model_id, BenchmarkSpec(batch_sizes=[1], **QUICK))

    def no_second_check(*args: object, **kwargs: object) -> None:
        raise AssertionError("checked again")

    monkeypatch.setattr(outcome, "check_profile", no_second_check)
    status, message, spec = run_benchmark_job(
        db_factory, model_id, BenchmarkSpec(batch_sizes=[1], **QUICK)
    )

    assert status == JobStatus.succeeded, message
    assert spec["dims"] == {"x.2": 256, "x.3": 256}
