"""A file that declares its batch fixed ([10, 3, 32, 32]) runs at that batch when no batch
size is asked: the synthetic data, an .npz, the timing of two models and an optimize run no
longer ask it for one sample and refuse ("fixed batch of 10; batch size 1")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from optistudio.core.data.batch import declared_batch
from optistudio.core.data.datasets import NpzDataset, SyntheticDataset
from optistudio.core.data.model_inputs import ModelInputs
from optistudio.core.errors import DataMismatch
from optistudio.core.measure.compare import ComparisonSpec, compare_models
from optistudio.core.model.info import TensorSpec
from optistudio.core.model.intake import inspect_model
from optistudio.core.optimize.run import optimize
from optistudio.core.optimize.spec import OptimizeSpec
from tests.core.passes.free_dims_models import fully_convolutional

QUICK = ComparisonSpec(min_pairs=10, min_seconds=0.1, max_seconds=2.0, threads=1)


def _spec(name: str, shape: list[int | str]) -> TensorSpec:
    return TensorSpec(name=name, dtype="float32", shape=shape)


@pytest.mark.parametrize(
    ("specs", "shapes", "expected"),
    [
        pytest.param([_spec("x", [10, 3, 32, 32])], {}, 10, id="fixed-10"),
        pytest.param([_spec("x", ["N", 3, 32, 32])], {}, 1, id="dynamic"),
        pytest.param([_spec("x", [10, 3]), _spec("y", [10, 5])], {}, 10, id="two-agree"),
        pytest.param([_spec("x", [10, 3]), _spec("y", [4, 5])], {}, 1, id="two-disagree"),
        pytest.param(
            [_spec("audio", ["N", 160]), _spec("h0", [4, 1, 64])], {}, 1, id="state-beside-open"
        ),
        pytest.param(
            [_spec("audio", ["N", 160]), _spec("h0", [2, "N", 64])], {}, 1, id="state-on-axis-1"
        ),
        pytest.param([_spec("x", [10, 3])], {"x": [10, 3]}, 1, id="given-a-shape"),
    ],
)
def test_declared_batch(
    specs: list[TensorSpec], shapes: dict[str, list[int]], expected: int
) -> None:
    assert declared_batch(specs, shapes) == expected


def test_synthetic_data_takes_the_declared_batch() -> None:
    fixed = [_spec("x", [10, 3, 8, 8])]

    data = SyntheticDataset(fixed, samples=12)

    assert data.batch_size == 10
    assert [batch["x"].shape for batch in data.batches()] == [(10, 3, 8, 8)] * 2
    with pytest.raises(DataMismatch, match="fixed batch of 10; batch size 1 "):
        SyntheticDataset(fixed, samples=12, batch_size=1)  # asked for: still refused


def test_npz_data_takes_the_declared_batch(tmp_path: Path) -> None:
    path = tmp_path / "data.npz"
    np.savez(path, x=np.zeros((20, 3, 8, 8), np.float32))

    data = NpzDataset(path, [_spec("x", [10, 3, 8, 8])])

    assert [batch["x"].shape for batch in data.batches()] == [(10, 3, 8, 8)] * 2


def test_npz_data_that_leaves_a_short_last_batch_is_refused_up_front(tmp_path: Path) -> None:
    path = tmp_path / "data.npz"
    np.savez(path, x=np.zeros((25, 3, 8, 8), np.float32))

    with pytest.raises(DataMismatch, match="holds 25 sample.*runs 10 at a time") as caught:
        NpzDataset(path, [_spec("x", [10, 3, 8, 8])])
    assert "multiple of 10" in (caught.value.hint or "")


def test_two_models_declared_at_batch_10_are_timed_at_it(tmp_path: Path) -> None:
    model = fully_convolutional(tmp_path / "fcn.onnx")

    result = compare_models(model, model, QUICK)

    assert result.batch_size == 10


def test_optimize_runs_a_model_declared_at_batch_10(tmp_path: Path) -> None:
    model = fully_convolutional(tmp_path / "fcn.onnx")
    assert ModelInputs().dataset(inspect_model(model).inputs, samples=4).batch_size == 10
    spec = OptimizeSpec(recipes=["int8_dynamic"], comparison=QUICK, accuracy_samples=10)

    report = optimize(model, spec, out_dir=tmp_path / "out")

    assert [(v.status, v.error) for v in report.variants] == [("made", None)]
    assert report.variants[0].ratio is not None  # timed against the original
