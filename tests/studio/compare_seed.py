"""A small stored history for the Compare tests: an original, a variant, results, environments."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from optistudio.db.models import JobKind, JobStatus
from optistudio.db.queries import (
    MeasurementRow,
    create_job,
    finish_job,
    get_or_create_environment,
    replace_measurements,
    set_job_result,
)
from optistudio.db.session import transaction
from optistudio.services.catalog import add_model_file

ENV = {"cpu_model": "Test CPU", "logical_cores": 2, "libraries": {"onnxruntime": "1.20.0"}}


@dataclass
class Seeded:
    original: int
    variant: int
    keys: list[str]
    """original b1, variant b1, original b8 (job.backend.batch.threads)."""


def benchmark(
    factory: Any,
    model_id: int,
    batch: int,
    p50: float,
    env: dict[str, Any],
    spec: dict[str, Any] | None = None,
) -> int:
    metrics = {"p10_ms": p50 * 0.9, "p50_ms": p50, "p90_ms": p50 * 1.1, "p99_ms": p50 * 1.3}
    metrics |= {"min_ms": p50 * 0.8, "mean_ms": p50, "throughput": batch * 1000 / p50}
    with transaction(factory) as s:
        job_id = create_job(s, kind=JobKind.benchmark, spec=spec or {}, model_id=model_id).id
        rows = [MeasurementRow("onnxruntime", batch, 2, k, v, "") for k, v in metrics.items()]
        replace_measurements(s, job_id=job_id, rows=rows)
        env_id = get_or_create_environment(s, data=env).id
        finish_job(s, job_id=job_id, status=JobStatus.succeeded, environment_id=env_id)
    return job_id


def seed(
    factory: Any,
    settings: Any,
    original_path: Any,
    variant_path: Any,
    *,
    accuracy: dict[str, Any] | None = None,
) -> Seeded:
    original = add_model_file(factory, settings, original_path, name="tiny").model_id
    variant = add_model_file(
        factory,
        settings,
        variant_path,
        name="tiny · int8",
        origin="variant",
        parent_id=original,
        recipe={"name": "int8_dynamic", "label": "INT8 dynamic", "passes": []},
        precision="int8",
    ).model_id
    accuracy = accuracy or {"mean_cosine": 0.99, "max_abs_error": 0.05, "data": "synthetic"}
    with transaction(factory) as s:
        job = create_job(s, kind=JobKind.optimize, spec={}, model_id=original).id
        set_job_result(
            s, job_id=job, result={"variants": [{"model_id": variant, "accuracy": accuracy}]}
        )
        finish_job(s, job_id=job, status=JobStatus.succeeded)
    a = benchmark(factory, original, 1, 2.0, ENV)
    b = benchmark(factory, variant, 1, 1.0, ENV)
    c = benchmark(factory, original, 8, 6.0, ENV | {"cpu_model": "Other CPU"})
    return Seeded(
        original, variant, [f"{a}.onnxruntime.1.2", f"{b}.onnxruntime.1.2", f"{c}.onnxruntime.8.2"]
    )
