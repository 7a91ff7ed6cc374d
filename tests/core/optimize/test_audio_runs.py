"""A run without data on an audio model (an input that is audio only by its shape) calibrates
and judges on built-in speech-like audio, never random inputs, at a stated rate, and says so:
the run's data line, each variant's mark and the command's JSON."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from audio_models import build_audio_model
from audio_shaped_models import mel_classifier, stft_classifier, waveform_classifier
from cli_runner import run_in_process

from optistudio.core.data.datasets import SyntheticDataset
from optistudio.core.measure.compare import ComparisonSpec
from optistudio.core.model.intake import inspect_model
from optistudio.core.optimize.no_data import without_data
from optistudio.core.optimize.provenance import origin
from optistudio.core.optimize.run import OptimizeSpec, optimize

QUICK = ComparisonSpec(min_pairs=10, min_seconds=0.1, max_seconds=2.0, threads=1)
AUDIO = "clips of built-in speech-like audio"


def fed(path: Path) -> str:
    """What a run without data feeds the model, in words (raises when it is not built-in)."""
    base = SyntheticDataset(inspect_model(path).inputs, samples=2)
    data = without_data(path, base, "classification", "probs")
    assert origin(data.judged) == "builtin" and not data.why_random
    assert origin(data.calibration) == "builtin"  # type: ignore[arg-type]
    return data.description


@pytest.mark.parametrize(
    ("build", "says"),
    [
        pytest.param(
            lambda p: waveform_classifier(p, length=144160),
            "samples at 16 kHz (144160 samples are 9.01 s at 16 kHz)",
            id="waveform-NL-144160",
        ),
        pytest.param(
            lambda p: waveform_classifier(p, length=43844, layout="NL1"),
            "samples at 22.05 kHz (43844 samples are 1.99 s at 22.05 kHz)",
            id="waveform-NL1-43844",
        ),
        pytest.param(lambda p: waveform_classifier(p, layout="N1L"), "samples at 16 kHz", id="N1L"),
        pytest.param(mel_classifier, "as log-mel frames, 80 mel bands", id="mel-N80T"),
        pytest.param(stft_classifier, "as STFT magnitude frames, 257 bins", id="stft-N1T257"),
    ],
)
def test_an_audio_shaped_model_gets_built_in_audio_not_random(tmp_path: Path, build, says):
    said = fed(build(tmp_path / "audio.onnx"))

    assert said.startswith("built-in samples: ") and f": 2 {AUDIO}" in said and says in said


def test_a_streaming_model_runs_on_audio_zero_state_and_its_rate(tmp_path: Path) -> None:
    path = build_audio_model(tmp_path / "vad.onnx")
    base = SyntheticDataset(inspect_model(path).inputs, samples=2)

    data = without_data(path, base, None)

    batch = next(iter(data.judged.batches()))
    assert origin(data.judged) == "builtin"
    assert int(batch["sr"]) == 16000 and not np.any(batch["state"])
    assert "input: 2 clips of built-in speech-like audio" in data.description


def test_int8_on_a_waveform_model_calibrates_and_is_judged_on_built_in_audio(
    tmp_path: Path,
) -> None:
    model = waveform_classifier(tmp_path / "wave.onnx")
    spec = OptimizeSpec(
        recipes=["int8_static"], target_backend="onnxruntime", comparison=QUICK, accuracy_samples=4
    )

    report = optimize(model, spec, out_dir=tmp_path / "out")

    [variant] = report.variants
    assert report.data.startswith(f"built-in samples: input_1: 4 {AUDIO}")
    assert "at 16 kHz (16000 samples are 1.00 s at 16 kHz)" in report.data
    assert "INT8 calibrated on other samples of the same sets" in report.data
    assert variant.builtin_samples == "calibrated and judged" and not variant.calibrated_on_random
    assert variant.accuracy.data == "builtin"


def test_the_command_names_the_built_in_audio_it_judged_on(tmp_path: Path) -> None:
    model = waveform_classifier(tmp_path / "wave.onnx", length=43844, layout="NL1")

    done = run_in_process(
        ["optimize", str(model), "--recipe", "fp16", "--seconds", "0.2"]
        + ["--out", str(tmp_path / "v"), "--json"],
        set_env={"OPTISTUDIO_DATA_DIR": str(tmp_path / "data")},
        unset_env=("OPTISTUDIO_DATABASE_URL",),
    )

    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["data"].startswith("built-in samples: input_1: ") and AUDIO in payload["data"]
    assert "samples at 22.05 kHz" in payload["data"]
    assert "random inputs" not in payload["data"]
