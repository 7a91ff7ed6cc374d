"""A run beside other work times every variant on one thread and says so; threads the user set
are never changed (optistudio.core.optimize.steady)."""

from __future__ import annotations

from pathlib import Path

import pytest

from optistudio.core.measure.compare import ComparisonSpec
from optistudio.core.optimize.run import optimize
from optistudio.core.optimize.spec import OptimizeSpec, UnsteadyTiming
from optistudio.core.optimize.steady import steady_note, steady_timing
from tests.conftest import build_matmul_model, every_core_busy

QUICK = ComparisonSpec(min_pairs=4, min_seconds=0.1, max_seconds=1.0)


def test_threads_the_user_set_are_kept_however_busy_the_machine() -> None:
    spec = OptimizeSpec(comparison=QUICK.model_copy(update={"threads": 2}))
    with every_core_busy():
        steady = steady_timing(spec)
    assert steady.spec.comparison.threads == 2 and steady.busy == ""
    assert steady_note(steady.busy) == []


def test_turned_off_it_never_changes_the_threads() -> None:
    spec = OptimizeSpec(comparison=QUICK, one_thread_when_busy=False)
    with every_core_busy():
        steady = steady_timing(spec)
    assert steady.spec == spec and steady.busy == ""


@pytest.mark.timing
def test_beside_busy_cores_every_variant_is_timed_on_one_thread(tmp_path: Path) -> None:
    model = build_matmul_model(tmp_path / "m.onnx")
    spec = OptimizeSpec(
        recipes=["fusion"],
        target_backend="onnxruntime",
        comparison=QUICK,
        unsteady_timing=UnsteadyTiming(candidate_seconds=0, job_seconds=0),
        accuracy_samples=4,
    )
    with every_core_busy():
        found = optimize(model, spec, out_dir=tmp_path / "out")
    assert found.spec.comparison.threads is None  # the user's spec is stored as given
    assert found.environment["threads"] == 1
    (note,) = [n for n in found.notes if "timed on one thread" in n]
    assert "other processes used" in note or "CPU steal" in note
    (variant,) = found.made
    assert variant.ratio is not None  # timed, at the one thread the environment records
