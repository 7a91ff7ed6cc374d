"""Stored results for the Compare page: what can be picked, and what a picked set needs.

A result is one (benchmark job, backend, batch size, threads). Keyword-only, no commits.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from optistudio.db.models import Environment, Job, JobKind, JobStatus, Measurement, Model
from optistudio.db.queries import results_rows

RESULT_FIELDS = (
    "job_id",
    "model_id",
    "model_name",
    "backend",
    "batch_size",
    "threads",
    "environment_id",
)


def result_index(s: Session) -> list[dict[str, Any]]:
    """Every stored result (distinct job, backend, batch, threads), newest job first."""
    query = (
        select(
            Measurement.job_id,
            Measurement.backend,
            Measurement.batch_size,
            Measurement.threads,
            Job.model_id,
            Job.kind,
            Model.name.label("model_name"),
            Model.precision,
        )
        .distinct()
        .join(Job, Measurement.job_id == Job.id)
        .outerjoin(Model, Job.model_id == Model.id)
        .where(Job.status == JobStatus.succeeded)
        .order_by(Measurement.job_id.desc(), Measurement.backend, Measurement.batch_size)
    )
    return [dict(row._mapping) for row in s.execute(query)]


def models_by_id(s: Session, *, ids: set[int]) -> dict[int, dict[str, Any]]:
    """Name, original and precision of each model in `ids`."""
    query = select(Model.id, Model.name, Model.parent_id, Model.precision).where(Model.id.in_(ids))
    return {row.id: dict(row._mapping) for row in s.execute(query)}


def environments_by_id(s: Session, *, ids: set[int]) -> dict[int, dict[str, Any]]:
    """The recorded environment data of each id in `ids`."""
    query = select(Environment.id, Environment.data).where(Environment.id.in_(ids))
    return {row.id: row.data for row in s.execute(query)}


def variant_accuracy(s: Session, *, original_ids: set[int]) -> dict[int, dict[str, Any]]:
    """Variant model id -> its accuracy report, from succeeded optimize jobs of those originals.

    A variant made more than once (same content) keeps the newest report.
    """
    query = (
        select(Job.id, Job.result)
        .where(
            Job.kind == JobKind.optimize,
            Job.status == JobStatus.succeeded,
            Job.model_id.in_(original_ids),
        )
        .order_by(Job.id)
    )
    found: dict[int, dict[str, Any]] = {}
    for job_id, result in s.execute(query):
        for variant in (result or {}).get("variants", []):
            if variant.get("model_id") and variant.get("accuracy"):
                found[variant["model_id"]] = variant["accuracy"] | {"optimize_job": job_id}
    return found


def stored_results(
    s: Session, *, job_ids: list[int] | None = None, model_id: int | None = None
) -> list[dict[str, Any]]:
    """One record per result (job, backend, batch, threads) with its figures under "metrics"."""
    found: dict[tuple[int, str, int, int], dict[str, Any]] = {}
    for r in results_rows(s, job_ids=job_ids, model_id=model_id):
        key = (r["job_id"], r["backend"], r["batch_size"], r["threads"])
        record = found.setdefault(key, {k: r[k] for k in RESULT_FIELDS} | {"metrics": {}})
        record["metrics"][r["metric"]] = r["value"]
    return list(found.values())


def variant_origin(s: Session, *, model_id: int, parent_id: int) -> dict[str, Any] | None:
    """The newest succeeded optimize job of `parent_id` that made `model_id`: its id, spec and
    that variant's entry of the result (recipe, accuracy, timing); None when none is stored."""
    query = (
        select(Job.id, Job.spec, Job.result)
        .where(
            Job.kind == JobKind.optimize,
            Job.status == JobStatus.succeeded,
            Job.model_id == parent_id,
        )
        .order_by(Job.id.desc())
    )
    for job_id, spec, result in s.execute(query):
        for variant in (result or {}).get("variants", []):
            if variant.get("model_id") == model_id:
                return {"job_id": job_id, "spec": spec, "variant": variant}
    return None
