"""The optimize job stores NNCF's INT8 on the OpenVINO model (an OpenVINO IR) as a catalog entry:
a model id with backend openvino and its precision, which a benchmark job times on OpenVINO,
a compare job measures against its original, and the export bundles as OpenVINO IR."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.core.measure.compare import ComparisonSpec
from optistudio.core.optimize.spec import NO_TASK
from optistudio.core.report.bundle import write_bundle
from optistudio.db.models import JobKind, JobStatus
from optistudio.db.queries import get_model
from optistudio.db.session import transaction
from optistudio.services.bundles import bundle_source
from optistudio.services.jobkinds import BENCHMARK, OPTIMIZE, CompareJobSpec, OptimizeJobSpec
from tests.core.passes.test_nncf import build_cnn
from tests.core.report.test_written_artifacts import parsed
from tests.workers.conftest import finished_job

QUICK = ComparisonSpec(min_pairs=10, min_seconds=0.1, max_seconds=1.0, threads=1)


@pytest.fixture
def ir_variant(db_factory, store_model, tmp_path: Path) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """The CNN stored, and its int8_nncf_ov variant made by an optimize job: (original, IR)."""
    original = store_model(build_cnn(tmp_path, opset=13), name="cnn")
    spec = OptimizeJobSpec(
        recipes=["int8_nncf_ov"],
        target_backend="openvino",
        comparison=QUICK,
        accuracy_samples=4,
        task=NO_TASK,
    )
    job = finished_job(db_factory, JobKind.optimize, original, spec)
    assert job.status == JobStatus.succeeded, job.message
    [variant] = OPTIMIZE.parse_result(job.result).variants
    assert variant.status == "made", variant.error
    assert variant.model_id is not None, "the IR variant was not stored"
    return original, variant.model_id


def test_the_ir_variant_is_stored_with_its_settings_and_exports_as_openvino_ir(  # type: ignore[no-untyped-def]
    db_factory, app_settings, ir_variant: tuple[int, int], tmp_path: Path
) -> None:
    original, made = ir_variant

    with transaction(db_factory) as s:
        row, parent = get_model(s, model_id=made), get_model(s, model_id=original)
        assert row is not None and parent is not None
        assert (row.backend, row.precision, row.threads) == ("openvino", "int8", 1)
        assert (row.parent_id, row.source, row.name) == (
            original,
            "variant",
            "cnn · int8_nncf_ov@openvino",
        )
        assert Path(row.path).name == "model.xml" and row.sha256 != parent.sha256
        assert row.recipe is not None and row.recipe["name"] == "int8_nncf_ov"

    report = write_bundle(bundle_source(db_factory, app_settings, made), tmp_path / "bundle.zip")

    name = "cnn_int8_nncf_ov_openvino"
    assert {f"openvino/{name}.xml", f"triton/{name}/1/model.bin"} <= set(report.files)
    assert "exists only as OpenVINO IR" in report.skipped["model"]
    with zipfile.ZipFile(report.path) as archive:
        config = parsed(archive.read(f"triton/{name}/config.pbtxt").decode())
    assert (config.backend, config.default_model_filename) == ("openvino", "model.xml")
    assert config.parameters["INFERENCE_NUM_THREADS"].string_value == "1"


def test_the_stored_ir_is_benchmarked_and_compared_on_openvino(  # type: ignore[no-untyped-def]
    db_factory, ir_variant: tuple[int, int]
) -> None:
    original, made = ir_variant
    timing = {"batch_sizes": [1], "min_runs": 5, "min_seconds": 0.1, "max_seconds": 0.5}

    on_openvino = finished_job(
        db_factory, JobKind.benchmark, made, BenchmarkSpec(backend="openvino", **timing)
    )
    on_onnxruntime = finished_job(
        db_factory, JobKind.benchmark, made, BenchmarkSpec(backend="onnxruntime", **timing)
    )

    assert on_openvino.status == JobStatus.succeeded, on_openvino.message
    result = BENCHMARK.parse_result(on_openvino.result)
    assert result.output_check is None and "Outputs not checked" in result.warnings[0]
    assert on_onnxruntime.status == JobStatus.failed
    assert on_onnxruntime.message is not None and "only the openvino backend" in (
        on_onnxruntime.message
    )
    spec = CompareJobSpec(
        candidate_model_id=made,
        backend="openvino",
        min_pairs=10,
        min_seconds=0.1,
        max_seconds=1.0,
        threads=1,
    )

    job = finished_job(db_factory, JobKind.compare, original, spec)

    assert job.status == JobStatus.succeeded, job.message
    assert job.result is not None and job.result["candidate_model_id"] == made
