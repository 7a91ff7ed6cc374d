"""The optimize job stores a variant made for OpenVINO as a model of its own, even when its file
is the original's bytes (FP32 on OpenVINO here; BF16 and FP16 inference, and INT8 with the rest
in BF16, take the same path on a CPU that computes them)."""

from __future__ import annotations

from pathlib import Path

from optimize_models import rms_norm_model

from optistudio.core.measure.compare import ComparisonSpec
from optistudio.db.models import JobKind, JobStatus
from optistudio.db.queries import get_model
from optistudio.db.session import transaction
from optistudio.services.jobkinds import OPTIMIZE, OptimizeJobSpec
from tests.workers.conftest import finished_job

QUICK = ComparisonSpec(min_pairs=10, min_seconds=0.1, max_seconds=1.0, threads=1)


def test_fp32_on_openvino_is_its_own_model_pointing_at_the_originals_file(  # type: ignore[no-untyped-def]
    db_factory, store_model, tmp_path: Path
) -> None:
    original = store_model(rms_norm_model(tmp_path / "rms_norm.onnx"), name="rms_norm")
    spec = OptimizeJobSpec(
        recipes=["fp32"], target_backend="openvino", comparison=QUICK, accuracy_samples=4
    )

    job = finished_job(db_factory, JobKind.optimize, original, spec)

    assert job is not None and job.status == JobStatus.succeeded, job and job.message
    [variant] = OPTIMIZE.parse_result(job.result).variants
    assert variant.status == "made" and variant.model_id not in (None, original)
    with transaction(db_factory) as s:
        made, stored = get_model(s, model_id=variant.model_id), get_model(s, model_id=original)
        assert made is not None and stored is not None
        assert (made.backend, made.precision, made.threads) == ("openvino", "fp32", 1)
        assert (made.path, made.parent_id) == (stored.path, original)
        assert made.name == "rms_norm · fp32@openvino"
