"""The optimize job reads the qat recipe's training data from this worker's copy of the stored
files and hands it to core as the qat pass's settings; without torch the qat variant fails with
the one sentence that names the extra, and the other variants are made (real run_job, SQLite)."""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from optimize_models import rms_norm_model

from optistudio.core.errors import ErrorCode
from optistudio.core.measure.compare import ComparisonSpec
from optistudio.core.optimize.run import OptimizeSpec
from optistudio.core.passes.qat import TORCH_MISSING
from optistudio.db.models import JobKind, JobStatus
from optistudio.services.catalog import store_dataset
from optistudio.services.jobkinds import OPTIMIZE, OptimizeJobSpec
from optistudio.workers import optimize_job as job_module
from tests.workers.conftest import finished_job

QUICK = ComparisonSpec(min_pairs=10, min_seconds=0.1, max_seconds=1.0, threads=1)
ELSEWHERE = Path("/studio-machine/data/artifacts/datasets")
"""Where another machine stored the files: what a job row records and this worker lacks."""


def stored(settings: Any, name: str, array_bytes: bytes) -> Path:
    stream = io.BytesIO(array_bytes)
    return store_dataset(settings, stream, filename=name)


def training_files(settings: Any) -> tuple[Path, Path]:
    """An .npz for rms_norm's input x [n, 4, 16] and its class ids, stored as the studio does."""
    inputs, labels = io.BytesIO(), io.BytesIO()
    np.savez(inputs, x=np.random.default_rng(0).standard_normal((8, 4, 16)).astype(np.float32))
    np.save(labels, np.arange(8) % 4)
    return (
        stored(settings, "train.npz", inputs.getvalue()),
        stored(settings, "y.npy", labels.getvalue()),
    )


@pytest.fixture
def rms_norm(store_model, tmp_path: Path) -> int:  # type: ignore[no-untyped-def]
    return store_model(rms_norm_model(tmp_path / "rms_norm.onnx"), name="rms_norm")


def test_the_recorded_training_files_become_this_workers_copies(app_settings) -> None:  # type: ignore[no-untyped-def]
    train, labels = training_files(app_settings)
    recorded = {
        "train_path": str(ELSEWHERE / train.name),
        "train_labels_path": str(ELSEWHERE / labels.name),
        "epochs": 2,
    }
    spec = OptimizeSpec(recipes=["qat"], pass_settings={"qat": recorded, "fusion": {}})

    local = job_module.local_training(spec)

    assert local.pass_settings["qat"] == {
        "train_path": str(train),
        "train_labels_path": str(labels),
        "epochs": 2,
    }
    assert local.pass_settings["fusion"] == {} and spec.pass_settings["qat"] == recorded


def test_a_spec_without_training_data_is_handed_on_as_it_is() -> None:
    spec = OptimizeSpec(recipes=["auto"], pass_settings={"fusion": {"patterns": []}})

    assert job_module.local_training(spec) is spec


@pytest.mark.skipif(
    importlib.util.find_spec("torch") is not None, reason="torch is installed: qat would train"
)
def test_without_torch_the_qat_variant_fails_naming_the_extra_and_fp32_is_made(  # type: ignore[no-untyped-def]
    db_factory, app_settings, rms_norm, monkeypatch
) -> None:
    train, labels = training_files(app_settings)
    handed: list[OptimizeSpec] = []

    def spy(model: Path, spec: OptimizeSpec, **kwargs: Any) -> Any:
        handed.append(spec)
        return optimize(model, spec, **kwargs)

    optimize = job_module.optimize
    monkeypatch.setattr(job_module, "optimize", spy)
    qat = {"train_path": str(ELSEWHERE / train.name), "train_labels_path": str(labels)}
    spec = OptimizeJobSpec(
        recipes=["qat", "fp32"],
        comparison=QUICK,
        accuracy_samples=4,
        pass_settings={"qat": qat | {"epochs": 1}},
    )

    job = finished_job(db_factory, JobKind.optimize, rms_norm, spec)

    status, message, result = job.status, job.message, OPTIMIZE.parse_result(job.result)
    assert status == JobStatus.succeeded, message
    assert message.startswith("Made 1 variant(s), 1 failed.")
    [given] = handed
    assert given.pass_settings["qat"] == {
        "train_path": str(train),
        "train_labels_path": str(labels),
        "epochs": 1,
    }
    qat_variant, fp32 = result.variants
    assert qat_variant.recipe.name == "qat" and qat_variant.status == "failed"
    assert qat_variant.error is not None
    assert qat_variant.error.code is ErrorCode.backend_unavailable
    assert qat_variant.error.message == TORCH_MISSING
    assert fp32.status == "made" and fp32.model_id is not None
