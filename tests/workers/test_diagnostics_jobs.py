"""The profile and soak jobs through run_job on a real SQLite database (no broker)."""

from __future__ import annotations

from pathlib import Path

import pytest
from diagnostic_models import build_cnn, quantize_cnn

from optistudio.core.measure.soak import SoakSpec
from optistudio.db.models import JobKind, JobStatus
from optistudio.services.jobkinds import OPERATOR_PROFILE, SOAK, OperatorProfileJobSpec
from tests.workers.conftest import finished_job


@pytest.fixture
def cnn_models(store_model, tmp_path: Path) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    cnn = build_cnn(tmp_path / "cnn.onnx")
    dynamic = quantize_cnn(cnn, tmp_path / "dyn.onnx", mode="dynamic")
    original = store_model(cnn, name="cnn")
    variant = store_model(dynamic, name="cnn int8", parent_id=original, precision="int8")
    return original, variant


def test_profile_job_stores_profiles_comparison_and_findings(db_factory, cnn_models) -> None:  # type: ignore[no-untyped-def]
    original, variant = cnn_models
    spec = OperatorProfileJobSpec(runs=3, warmup_runs=1, variant_model_id=variant)

    job = finished_job(db_factory, JobKind.operator_profile, original, spec)

    assert job.status == JobStatus.succeeded, job.message
    assert job.environment_id is not None
    assert "First finding" in job.message
    result = job.result
    assert result["variant_name"] == "cnn int8"
    assert (result["profile"]["model"], result["variant"]["model"]) == ("cnn", "cnn int8")
    assert result["profile"]["nodes"] and result["variant"]["nodes"]
    assert "dynamic_conv" in {f["rule"] for f in result["findings"]}
    assert result["layer_errors"]
    typed = OPERATOR_PROFILE.parse_result(result)  # the stored JSON reads back as the kind's result
    assert typed.variant is not None and typed.variant_model_id == variant


def test_profile_job_with_a_missing_variant_fails_with_the_reason(db_factory, cnn_models) -> None:  # type: ignore[no-untyped-def]
    spec = OperatorProfileJobSpec(runs=2, variant_model_id=999)

    job = finished_job(db_factory, JobKind.operator_profile, cnn_models[0], spec)

    assert job.status == JobStatus.failed
    assert "#999" in job.message and job.error_detail is None


def test_soak_job_stores_the_verdict(db_factory, cnn_models) -> None:  # type: ignore[no-untyped-def]
    spec = SoakSpec(seconds=1.0, batch_sizes=[1, 2])

    job = finished_job(db_factory, JobKind.soak, cnn_models[0], spec)

    assert job.status == JobStatus.succeeded, job.message
    assert job.result["verdict"] == "stable"
    assert SOAK.parse_result(job.result).verdict == "stable"
    assert job.message.startswith("Stable")
