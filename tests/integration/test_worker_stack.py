"""Benchmark jobs through a real Redis broker and a real Celery worker process."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.db.queries import results_rows
from optistudio.db.session import transaction
from optistudio.services.catalog import add_model_file
from optistudio.studio.jobs_services import cancel_job, submit_benchmark

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUICK = BenchmarkSpec(
    batch_sizes=[1, 8],
    warmup_runs=2,
    min_runs=10,
    min_seconds=0.2,
    max_seconds=2.0,
    window_seconds=0.05,
)


def unloadable_model(path: Path) -> Path:
    """Valid ONNX that ONNX Runtime cannot load: an op from a domain it does not know."""
    graph = helper.make_graph(
        [helper.make_node("Mystery", ["x"], ["y"], domain="com.example")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    )
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_benchmark_job_end_to_end(worker_stack, tiny_model: Path) -> None:
    model_id = add_model_file(
        worker_stack.factory, worker_stack.settings, tiny_model, name="tiny"
    ).model_id

    job_id = submit_benchmark(
        worker_stack.factory, model_id=model_id, spec=QUICK, send=worker_stack.send
    )
    job = worker_stack.wait_for_job(job_id, statuses={"succeeded", "failed"})

    assert job.status.value == "succeeded", job.message
    assert job.worker.startswith("cpu@") and job.attempts == 1
    with transaction(worker_stack.factory) as s:
        rows = results_rows(s, job_ids=[job_id])
    p50 = {r["batch_size"]: r["value"] for r in rows if r["metric"] == "p50_ms"}
    assert set(p50) == {1, 8} and all(v > 0 for v in p50.values())


def test_worker_survives_a_model_it_cannot_load(worker_stack, tiny_model: Path, tmp_path) -> None:
    # Uploads that ONNX Runtime cannot load are refused at intake; a variant made for another
    # backend is stored without that check, so a worker can still meet one.
    bad_id = add_model_file(
        worker_stack.factory,
        worker_stack.settings,
        unloadable_model(tmp_path / "bad.onnx"),
        name="bad",
        origin="variant",
    ).model_id
    good_id = add_model_file(
        worker_stack.factory, worker_stack.settings, tiny_model, name="tiny"
    ).model_id

    bad_job = submit_benchmark(
        worker_stack.factory, model_id=bad_id, spec=QUICK, send=worker_stack.send
    )
    good_job = submit_benchmark(
        worker_stack.factory, model_id=good_id, spec=QUICK, send=worker_stack.send
    )

    bad = worker_stack.wait_for_job(bad_job, statuses={"succeeded", "failed"})
    good = worker_stack.wait_for_job(good_job, statuses={"succeeded", "failed"})
    assert bad.status.value == "failed"
    assert "ONNX Runtime could not load this model" in bad.message
    assert "Traceback" not in bad.message
    assert good.status.value == "succeeded", good.message


def test_cancel_stops_a_running_job(worker_stack, tiny_model: Path) -> None:
    model_id = add_model_file(
        worker_stack.factory, worker_stack.settings, tiny_model, name="tiny"
    ).model_id
    slow = QUICK.model_copy(update={"min_seconds": 60.0, "max_seconds": 90.0})
    job_id = submit_benchmark(
        worker_stack.factory, model_id=model_id, spec=slow, send=worker_stack.send
    )
    worker_stack.wait_for_job(job_id, statuses={"running"})

    outcome = cancel_job(
        worker_stack.factory,
        job_id=job_id,
        revoke=lambda task_id: worker_stack.app.control.revoke(task_id),
    )
    job = worker_stack.wait_for_job(
        job_id, statuses={"cancelled", "failed", "succeeded"}, timeout=15
    )

    assert "will stop" in outcome
    assert job.status.value == "cancelled"
    with transaction(worker_stack.factory) as s:
        assert results_rows(s, job_ids=[job_id]) == []


def test_broker_down_fails_the_job_with_advice(db_factory, tiny_model: Path, app_settings) -> None:
    model_id = add_model_file(db_factory, app_settings, tiny_model, name="tiny").model_id

    def unreachable(name, args):
        raise ConnectionRefusedError("Error 111 connecting to 127.0.0.1:1")

    job_id = submit_benchmark(db_factory, model_id=model_id, spec=QUICK, send=unreachable)

    with transaction(db_factory) as s:
        from optistudio.db.queries import get_job

        job = get_job(s, job_id=job_id)
    assert job.status.value == "failed" and job.error_code == "broker_unavailable"
    assert "job queue" in job.message and "make up" in job.error_hint


def test_comparison_job_stores_ratio_interval_and_verdict(worker_stack, tiny_model: Path) -> None:
    from optistudio.services.jobkinds import CompareJobSpec
    from optistudio.studio.jobs_services import submit_comparison
    from optistudio.studio.results_services import comparison_rows

    model_id = add_model_file(
        worker_stack.factory, worker_stack.settings, tiny_model, name="tiny"
    ).model_id
    spec = CompareJobSpec(
        candidate_model_id=model_id, threads=1, min_pairs=200, min_seconds=0.5, max_seconds=5.0
    )

    job_id = submit_comparison(
        worker_stack.factory, spec=spec, baseline_id=model_id, send=worker_stack.send
    )
    job = worker_stack.wait_for_job(job_id, statuses={"succeeded", "failed"})

    assert job.status.value == "succeeded", job.message
    assert job.result["verdict"] == "no significant difference"
    assert job.result["low"] <= job.result["ratio"] <= job.result["high"]
    assert job.result["pairs"] >= 200
    assert "#" in job.message and "no significant difference" in job.message
    [row] = comparison_rows(worker_stack.factory)
    assert row["job"] == job_id and row["B"] == f"#{model_id} tiny"


def test_comparison_with_a_deleted_candidate_fails_cleanly(worker_stack, tiny_model: Path) -> None:
    from optistudio.services.jobkinds import CompareJobSpec
    from optistudio.studio.jobs_services import submit_comparison

    model_id = add_model_file(
        worker_stack.factory, worker_stack.settings, tiny_model, name="tiny"
    ).model_id
    spec = CompareJobSpec(candidate_model_id=9999, min_seconds=0.1, max_seconds=1.0)

    job_id = submit_comparison(
        worker_stack.factory, spec=spec, baseline_id=model_id, send=worker_stack.send
    )
    job = worker_stack.wait_for_job(job_id, statuses={"succeeded", "failed"})

    assert job.status.value == "failed"
    assert job.message == "Model #9999 (B) does not exist any more."


def test_optimize_job_stores_variants_with_their_recipe(worker_stack, tmp_path: Path) -> None:
    from optistudio.core.model.samples import build_sample
    from optistudio.db.queries import list_models
    from optistudio.services.jobkinds import OptimizeJobSpec
    from optistudio.studio.optimize_services import optimization_runs, submit_optimization

    cnn = build_sample("tiny_cnn", tmp_path)
    model_id = add_model_file(
        worker_stack.factory, worker_stack.settings, cnn, name="tiny_cnn"
    ).model_id
    spec = OptimizeJobSpec(
        recipes=["graph", "fusion"],
        accuracy_samples=4,
        comparison={"min_pairs": 20, "min_seconds": 0.2, "max_seconds": 3.0},
    )

    job_id = submit_optimization(
        worker_stack.factory, spec=spec, model_id=model_id, send=worker_stack.send
    )
    job = worker_stack.wait_for_job(job_id, statuses={"succeeded", "failed"}, timeout=120)

    assert job.status.value == "succeeded", job.message
    assert job.message.startswith("Made 2 variant(s).")
    with transaction(worker_stack.factory) as s:
        variants = [m for m in list_models(s) if m.parent_id == model_id]
        recipes = sorted(m.recipe["name"] for m in variants)
    assert recipes == ["fusion", "graph"]
    [run] = optimization_runs(worker_stack.factory)
    assert {row["recipe"] for row in run.variants} == {"Graph optimization", "Operator fusion"}
    assert all(row["mean cosine"] > 0.999 for row in run.variants)
