"""Profiles and the stage breakdown run on the inputs the user gave."""

from __future__ import annotations

from pathlib import Path

from audio_models import SAMPLE_RATE, build_audio_model

from optistudio.core.diagnose.diagnostics import DiagnosticsSpec, diagnose
from optistudio.core.diagnose.operator_profile import OperatorProfileSpec

GIVEN = {"input": [3, 512], "state": [2, 3, 16]}


def test_diagnose_profiles_and_times_stages_at_the_given_shapes(tmp_path: Path) -> None:
    audio = build_audio_model(tmp_path / "audio.onnx")
    spec = DiagnosticsSpec(shapes=GIVEN, values={"sr": SAMPLE_RATE}, runs=3, warmup_runs=1)

    report = diagnose(audio, spec, work_dir=tmp_path / "work")

    assert report.profile.batch_size == 3  # implied by the shapes, not the spec's 1
    assert report.profile.warnings == []
    assert [s.stage for s in report.breakdown.stages] == ["inference"]
    assert report.breakdown.batch_size == 3


def test_profile_spec_carries_the_input_fields() -> None:
    spec = DiagnosticsSpec(shapes=GIVEN, dims={"time": 8}, values={"sr": 1.0}, inputs_file="a")

    profile = spec.profile_spec()
    pipeline = spec.pipeline()

    for part in (profile, pipeline):
        assert (part.shapes, part.dims, part.values, part.inputs_file) == (
            GIVEN,
            {"time": 8},
            {"sr": 1.0},
            "a",
        )
    assert isinstance(profile, OperatorProfileSpec)
