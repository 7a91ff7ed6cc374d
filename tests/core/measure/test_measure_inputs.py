"""Benchmark, comparison and soak run a model on the inputs the user gave."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from audio_models import SAMPLE_RATE, build_audio_model

from optistudio.core.errors import InferenceFailed, InvalidSpec
from optistudio.core.measure.benchmark import BenchmarkSpec, run_benchmark
from optistudio.core.measure.compare import ComparisonSpec, compare_models
from optistudio.core.measure.soak import SoakSpec, input_variants
from optistudio.core.model.intake import inspect_model

QUICK = {
    "warmup_runs": 1,
    "min_runs": 5,
    "min_seconds": 0.05,
    "max_seconds": 1.0,
    "window_seconds": 0.02,
    "threads": 1,
}
GIVEN = {"input": [3, 512], "state": [2, 3, 16]}
RATE = {"sr": SAMPLE_RATE}


@pytest.fixture(scope="module")
def audio(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_audio_model(tmp_path_factory.mktemp("audio") / "audio.onnx")


def test_benchmark_runs_every_input_at_its_given_shape(audio: Path) -> None:
    report = run_benchmark(audio, BenchmarkSpec(shapes=GIVEN, values=RATE, **QUICK))

    [result] = report.results
    assert result.batch_size == 3  # the batch the shapes imply
    assert result.input_shapes == {"input": [3, 512], "state": [2, 3, 16], "sr": []}


def test_without_the_sample_rate_the_model_cannot_run(audio: Path) -> None:
    with pytest.raises(InferenceFailed):
        run_benchmark(audio, BenchmarkSpec(shapes=GIVEN, **QUICK))


def test_benchmark_sweeps_the_batch_over_a_state_batched_on_axis_1(audio: Path) -> None:
    report = run_benchmark(audio, BenchmarkSpec(batch_sizes=[1, 4], values=RATE, **QUICK))

    assert [r.input_shapes["state"] for r in report.results] == [[2, 1, 16], [2, 4, 16]]


def test_a_fixed_batch_past_dim_0_runs_when_its_shape_is_given(tmp_path: Path) -> None:
    fixed = build_audio_model(tmp_path / "fixed.onnx", batch=1)

    with pytest.raises(InvalidSpec, match="fixed batch size of 2 \\(input 'state'\\)"):
        run_benchmark(fixed, BenchmarkSpec(batch_sizes=[1], values=RATE, **QUICK))
    report = run_benchmark(
        fixed,
        BenchmarkSpec(batch_sizes=[1], shapes={"state": [2, 1, 16]}, values=RATE, **QUICK),
    )

    assert [r.batch_size for r in report.results] == [1]


def test_benchmark_uses_the_arrays_of_an_inputs_file(audio: Path, tmp_path: Path) -> None:
    arrays = {
        "input": np.ones((2, 64), np.float32),
        "state": np.zeros((2, 2, 16), np.float32),
        "sr": np.array(SAMPLE_RATE, np.int64),
    }
    np.savez(tmp_path / "inputs.npz", **arrays)

    report = run_benchmark(audio, BenchmarkSpec(inputs_file=str(tmp_path / "inputs.npz"), **QUICK))

    [result] = report.results
    assert result.batch_size == 2
    assert result.input_shapes == {"input": [2, 64], "state": [2, 2, 16], "sr": []}


def test_comparison_reports_the_batch_the_shapes_imply(audio: Path) -> None:
    spec = ComparisonSpec(
        shapes=GIVEN, values=RATE, min_pairs=2, min_seconds=0.0, max_seconds=1.0, warmup_runs=1
    )

    comparison = compare_models(audio, audio, spec)

    assert comparison.batch_size == 3


def test_soak_keeps_given_shapes_and_values_in_every_variant(audio: Path) -> None:
    spec = SoakSpec(shapes={"state": [2, 2, 16]}, values=RATE)

    variants, _ = input_variants(inspect_model(audio), spec)

    assert {v["state"].shape for v in variants} == {(2, 2, 16)}
    # the audio shares the state's batch (2) and cycles only its dynamic length
    assert {v["input"].shape for v in variants} == {(2, size) for size in spec.dim_sizes}
    assert all(int(v["sr"]) == SAMPLE_RATE for v in variants)


def test_soak_cycles_batch_sizes_over_the_state_and_keeps_named_dims(audio: Path) -> None:
    spec = SoakSpec(batch_sizes=[1, 4], dims={"time": 32}, values=RATE)

    variants, _ = input_variants(inspect_model(audio), spec)

    assert [(v["input"].shape, v["state"].shape) for v in variants] == [
        ((1, 32), (2, 1, 16)),
        ((4, 32), (2, 4, 16)),
    ]


def test_stored_specs_without_the_new_fields_still_load() -> None:
    stored = {"backend": "onnxruntime", "shapes": {"x": [1, 4]}, "dims": {"sequence": 8}}

    spec = BenchmarkSpec.model_validate(stored)

    assert (spec.values, spec.inputs_file) == ({}, None)
