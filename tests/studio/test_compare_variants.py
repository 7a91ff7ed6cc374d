"""Optimize variants on Compare as their optimize job timed them (no second benchmark)."""

from __future__ import annotations

from typing import Any

import pytest
from compare_seed import ENV, Seeded, benchmark, seed

from optistudio.db.models import JobKind, JobStatus
from optistudio.db.queries import create_job, finish_job, get_or_create_environment, set_job_result
from optistudio.db.session import transaction
from optistudio.studio.compare_services import (
    build_snapshot,
    read_selection,
    result_options,
)

RECIPE = {"name": "int8_nncf_bf16", "label": "NNCF INT8 + BF16", "steps": [], "precision": "bf16"}
ACCURACY = {"samples": 8, "data": "builtin", "max_abs_error": 0.02, "mean_abs_error": 0.004}
ACCURACY |= {"mean_cosine": 0.998, "min_cosine": 0.99, "per_output_max_abs_error": {"y": 0.02}}
ACCURACY |= {"nan_or_inf": False}


def optimized(factory: Any, model_id: int, variant_id: int) -> int:
    """A finished optimize job of `model_id` with one timed variant and one that failed."""
    made = {"recipe": RECIPE, "precision": "int8", "backend": "openvino", "model_id": variant_id}
    made |= {"ratio": 0.5, "ratio_low": 0.45, "ratio_high": 0.55, "verdict": "faster"}
    made |= {"speedup": 2.0, "original_p50_ms": 4.0, "variant_p50_ms": 2.0}
    made |= {"accuracy": ACCURACY, "within_budget": True}
    failed = {"recipe": RECIPE | {"name": "fp16"}, "precision": "fp16", "error": "no"}
    result = {"spec": {"recipes": ["auto"]}, "data": "builtin", "chosen": RECIPE["name"]}
    result |= {"variants": [made, failed]}
    with transaction(factory) as s:
        job = create_job(s, kind=JobKind.optimize, spec={}, model_id=model_id).id
        set_job_result(s, job_id=job, result=result)
        env = get_or_create_environment(s, data=ENV).id
        finish_job(s, job_id=job, status=JobStatus.succeeded, environment_id=env)
    return job


@pytest.fixture
def seeded(db_factory, app_settings, make_model) -> Seeded:
    return seed(
        db_factory, app_settings, make_model("tiny.onnx"), make_model("v.onnx", features=12)
    )


def test_an_optimize_variant_is_offered_and_compared_as_it_was_timed(
    db_factory, seeded: Seeded
) -> None:
    job = optimized(db_factory, seeded.original, seeded.variant)
    options = result_options(db_factory)
    assert f"v{job}.0" in options and f"v{job}.o" in options
    assert f"v{job}.1" not in options  # failed: nothing was timed
    assert "NNCF INT8 + BF16 [int8+bf16] · openvino · optimize run" in options[f"v{job}.0"]

    keys = [f"v{job}.o", f"v{job}.0", seeded.keys[0], f"v{job}.7"]
    selection = read_selection({"results": ",".join(keys), "baseline": f"v{job}.o"})
    assert selection.keys == keys and not selection.problems
    snapshot, missing = build_snapshot(db_factory, selection)

    assert missing == [f"v{job}.7"]
    original, variant, bench = snapshot.rows
    assert (original.metrics["p50_ms"], variant.metrics["p50_ms"]) == (4.0, 2.0)
    assert variant.metrics["speedup_vs_original"] == 2.0
    assert variant.metrics["cosine_error"] == pytest.approx(0.002)
    assert variant.precision == "int8+bf16" and variant.parent_id == seeded.original
    assert "2.00x its original (95 % interval 1.82-2.22x)" in variant.accuracy_note
    assert "accuracy on built-in samples, not your data" in variant.accuracy_note
    assert snapshot.baseline == f"v{job}.o"
    assert bench.key == seeded.keys[0]  # a benchmark result beside them
    assert variant.environment_id is not None and str(variant.environment_id) in (
        snapshot.environments
    )


def test_a_bad_variant_key_is_a_problem_not_an_error(db_factory) -> None:
    selection = read_selection({"results": "v12.x,v.1,v3.o"})
    assert selection.keys == ["v3.o"] and len(selection.problems) == 2
    snapshot, missing = build_snapshot(db_factory, selection)
    assert snapshot.rows == [] and missing == ["v3.o"]


def test_a_benchmark_only_store_offers_no_variant_rows(db_factory, seeded: Seeded) -> None:
    benchmark(db_factory, seeded.original, 1, 0.5, ENV)
    assert not any(key.startswith("v") for key in result_options(db_factory))
