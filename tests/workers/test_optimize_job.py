"""The optimize job through run_job on a real SQLite database (no broker): a failed recipe is a
failed variant with its error, the job succeeds with the others and says how many failed."""

from __future__ import annotations

from pathlib import Path

import pytest
from optimize_models import rms_norm_model

from optistudio.core.errors import ArtifactStoreError, ErrorCode, PassFailed
from optistudio.core.measure.compare import ComparisonSpec
from optistudio.db.models import JobKind, JobStatus
from optistudio.services.jobkinds import OPTIMIZE, OptimizeJobSpec
from optistudio.workers import optimize_job as job_module
from tests.workers.conftest import finished_job

QUICK = ComparisonSpec(min_pairs=10, min_seconds=0.1, max_seconds=1.0, threads=1)


def run_optimize(factory, model_id: int, recipes: list[str]):  # type: ignore[no-untyped-def]
    spec = OptimizeJobSpec(recipes=recipes, comparison=QUICK, accuracy_samples=4)
    return finished_job(factory, JobKind.optimize, model_id, spec)


@pytest.fixture
def rms_norm(store_model, tmp_path: Path) -> int:  # type: ignore[no-untyped-def]
    return store_model(rms_norm_model(tmp_path / "rms_norm.onnx"), name="rms_norm")


@pytest.fixture
def simplify_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fp32 recipe has no steps; every other recipe starts with simplify, which now fails."""
    from optistudio.core.passes import graph

    def fails(*args: object, **kwargs: object) -> None:
        raise PassFailed("onnxslim could not simplify this model: boom", hint="Try fp32.")

    monkeypatch.setattr(graph, "run_simplify", fails)


def test_a_graph_variant_in_onnx_runtimes_own_ops_is_made_and_stored(db_factory, rms_norm):  # type: ignore[no-untyped-def]
    job = run_optimize(db_factory, rms_norm, ["graph"])

    assert job.status == JobStatus.succeeded, job.message
    [variant] = OPTIMIZE.parse_result(job.result).variants
    assert variant.status == "made" and variant.model_id is not None, variant.error


def test_the_job_message_and_the_page_carry_the_runs_headline(db_factory, rms_norm):  # type: ignore[no-untyped-def]
    from optistudio.core.optimize.headline import headline
    from optistudio.studio.optimize_services import optimization_runs

    job = run_optimize(db_factory, rms_norm, ["graph"])

    result = OPTIMIZE.parse_result(job.result)
    assert result.headline == headline(result.variants, result.chosen)
    assert job.message == f"Made 1 variant(s). {result.headline}"
    [run] = optimization_runs(db_factory)
    assert (run.headline, run.message) == (result.headline, "Made 1 variant(s).")


@pytest.mark.usefixtures("simplify_fails")
def test_a_failed_recipe_is_a_failed_variant_and_the_job_succeeds(db_factory, rms_norm):  # type: ignore[no-untyped-def]
    job = run_optimize(db_factory, rms_norm, ["graph", "fp32"])

    assert job.status == JobStatus.succeeded, job.message
    assert job.message.startswith("Made 1 variant(s), 1 failed.")
    graph, fp32 = OPTIMIZE.parse_result(job.result).variants
    assert graph.status == "failed" and graph.model_id is None and graph.path is None
    assert graph.error is not None and graph.error.code is ErrorCode.pass_failed
    assert (graph.error.message, graph.error.hint) == (
        "onnxslim could not simplify this model: boom",
        "Try fp32.",
    )
    assert fp32.status == "made" and fp32.model_id is not None


@pytest.mark.usefixtures("simplify_fails")
def test_when_no_recipe_makes_a_variant_the_message_says_so(db_factory, rms_norm):  # type: ignore[no-untyped-def]
    job = run_optimize(db_factory, rms_norm, ["graph"])

    assert job.status == JobStatus.succeeded
    assert job.message == "No variant could be made: 1 recipe(s) failed; see each one's reason."
    assert OPTIMIZE.parse_result(job.result).chosen is None


def test_a_variant_that_cannot_be_stored_fails_with_the_reason(  # type: ignore[no-untyped-def]
    db_factory, rms_norm, monkeypatch
) -> None:
    def store_refused(*args: object, **kwargs: object) -> None:
        raise ArtifactStoreError("The artifact store refused the upload.", hint="Check S3.")

    monkeypatch.setattr(job_module, "add_model_file", store_refused)

    job = run_optimize(db_factory, rms_norm, ["fp32"])

    assert job.status == JobStatus.succeeded
    [variant] = OPTIMIZE.parse_result(job.result).variants
    assert variant.status == "failed" and variant.model_id is None
    assert variant.error is not None and variant.error.code is ErrorCode.artifact_store_failed
    assert variant.error.message == "Made, but not stored: The artifact store refused the upload."
    assert variant.error.hint == "Check S3."
