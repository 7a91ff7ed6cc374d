"""Output checks of a backend's run against ONNX Runtime FP32 on CPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from optistudio.core.backends import get_backend
from optistudio.core.measure.benchmark import BenchmarkSpec, run_benchmark
from optistudio.core.numerics.crosscheck import check_outputs

QUICK = {"warmup_runs": 1, "min_runs": 3, "min_seconds": 0.0, "max_seconds": 0.3}


def reference() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((4, 10)).astype(np.float32)


def test_nan_or_inf_always_fails_even_in_int8() -> None:
    ref = reference()
    broken = ref.copy()
    broken[1, 3] = np.nan
    check = check_outputs(["y"], [ref], [broken], precision="int8")
    assert not check.passed
    assert check.problems == ["y has NaN or Inf"]


def test_the_tolerance_follows_the_precision() -> None:
    ref = reference()
    noisy = ref + np.random.default_rng(1).normal(0, 0.01, ref.shape).astype(np.float32)
    assert not check_outputs(["y"], [ref], [noisy], precision="fp32").passed
    assert check_outputs(["y"], [ref], [noisy], precision="fp16").passed
    assert check_outputs(["y"], [ref], [noisy], precision="int8").passed
    assert check_outputs(["y"], [ref], [ref.copy()], precision="fp32").passed


def test_a_wrong_answer_fails_in_every_precision() -> None:
    ref = reference()
    wrong = np.random.default_rng(2).standard_normal(ref.shape).astype(np.float32)
    for precision in ("fp32", "fp16", "bf16", "int8"):
        check = check_outputs(["y"], [ref], [wrong], precision=precision)
        assert not check.passed and "cosine" in check.problems[0], precision


@pytest.mark.skipif(
    not get_backend("openvino").availability().ok, reason="OpenVINO is not available"
)
def test_openvino_benchmark_carries_a_passed_output_check(tiny_model: Path) -> None:
    report = run_benchmark(tiny_model, BenchmarkSpec(backend="openvino", batch_sizes=[2], **QUICK))
    assert report.output_check is not None
    assert report.output_check.passed, report.output_check.problems
    assert report.output_check.outputs["y"]["cosine_min"] > 0.99999


def test_the_reference_run_is_not_checked_against_itself(tiny_model: Path) -> None:
    report = run_benchmark(tiny_model, BenchmarkSpec(batch_sizes=[2], **QUICK))
    assert report.output_check is None
    bound = run_benchmark(tiny_model, BenchmarkSpec(batch_sizes=[2], io_binding=True, **QUICK))
    assert bound.output_check is None
    assert bound.runtime_details["io_binding"] is True
    provider = run_benchmark(tiny_model, BenchmarkSpec(batch_sizes=[2], precision="int8", **QUICK))
    assert provider.output_check is not None and provider.output_check.passed
