"""What the Compare page and shared links do, as plain functions tests call without Streamlit.

A stored result is one (benchmark job, backend, batch size, threads), keyed
`job.backend.batch.threads` in the URL (`?results=12.onnxruntime.1.4,13.onnxruntime.1.4`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker

from optistudio.core.report.snapshot import CompareSnapshot, ResultRow
from optistudio.db.models import JobKind
from optistudio.db.queries import finished_jobs
from optistudio.db.selection import (
    environments_by_id,
    models_by_id,
    result_index,
    stored_results,
    variant_accuracy,
)
from optistudio.db.session import transaction
from optistudio.db.shares import create_share, list_shares, open_share, revoke_share
from optistudio.services.jobkinds import EXPORT, ExportJobSpec
from optistudio.studio.services import SendTask, submit_job

KEY_PATTERN = re.compile(r"(\d{1,12})\.([a-z0-9_]{1,32})\.(\d{1,6})\.(\d{1,4})")
PARAM_RESULTS, PARAM_BASELINE, PARAM_BUDGET = "results", "baseline", "budget"
REFERENCE = {"mean_cosine": 1.0, "cosine_error": 0.0, "max_abs_error": 0.0, "top1_agreement": 1.0}
"""An original is its own reference: exact by definition."""


def result_key(job_id: int, backend: str, batch_size: int, threads: int) -> str:
    return f"{job_id}.{backend}.{batch_size}.{threads}"


@dataclass
class Selection:
    """What the URL asks to compare, and what in it could not be read."""

    keys: list[str] = field(default_factory=list)
    baseline: str | None = None
    budget_ms: float | None = None
    problems: list[str] = field(default_factory=list)


def read_selection(params: Mapping[str, str]) -> Selection:
    """The selection in query parameters; malformed parts become problems, never errors."""
    selection = Selection()
    for part in filter(None, (params.get(PARAM_RESULTS) or "").split(",")):
        if not KEY_PATTERN.fullmatch(part.strip()):
            selection.problems.append(f"{part[:40]!r} in the link is not a result id; left out.")
        elif part.strip() not in selection.keys:
            selection.keys.append(part.strip())
    baseline = params.get(PARAM_BASELINE)
    selection.baseline = baseline if baseline in selection.keys else None
    budget = params.get(PARAM_BUDGET)
    if budget:
        try:
            selection.budget_ms = float(budget) if float(budget) > 0 else None
        except ValueError:
            selection.problems.append(f"Latency budget {budget[:20]!r} is not a number; ignored.")
    return selection


def write_selection(params: MutableMapping[str, str], selection: Selection) -> None:
    """Put the selection in query parameters (and drop the ones that are unset)."""
    wanted = {
        PARAM_RESULTS: ",".join(selection.keys),
        PARAM_BASELINE: selection.baseline or "",
        PARAM_BUDGET: f"{selection.budget_ms:g}" if selection.budget_ms else "",
    }
    for name, value in wanted.items():
        if value and params.get(name) != value:
            params[name] = value
        elif not value and name in params:
            del params[name]


def result_options(factory: sessionmaker[Session]) -> dict[str, str]:
    """Every stored result, key -> label, newest first."""
    with transaction(factory) as s:
        rows = result_index(s)
    return {
        result_key(r["job_id"], r["backend"], r["batch_size"], r["threads"]): (
            f"#{r['job_id']} {r['model_name'] or 'deleted model'}{_precision(r['precision'])} · "
            f"{r['backend']} · "
            f"batch {r['batch_size']} · {r['threads']} threads"
        )
        for r in rows
    }


def _precision(precision: str | None) -> str:
    return f" [{precision}]" if precision and precision != "fp32" else ""


def build_snapshot(
    factory: sessionmaker[Session],
    selection: Selection,
    *,
    title: str = "Comparison",
) -> tuple[CompareSnapshot, list[str]]:
    """The selected results as a snapshot, and the keys that are not stored (deleted, unknown)."""
    job_ids = sorted({int(key.split(".", 1)[0]) for key in selection.keys})
    with transaction(factory) as s:
        measured = _by_key(stored_results(s, job_ids=job_ids), set(selection.keys))
        models = models_by_id(s, ids={r["model_id"] for r in measured.values() if r["model_id"]})
        parents = {m["parent_id"] for m in models.values() if m["parent_id"]}
        accuracy = variant_accuracy(s, original_ids=parents) if parents else {}
        env_ids = {r["environment_id"] for r in measured.values() if r["environment_id"]}
        environments = environments_by_id(s, ids=env_ids)
    rows = [_row(key, measured[key], models, accuracy) for key in selection.keys if key in measured]
    snapshot = CompareSnapshot(
        title=title,
        created_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        rows=rows,
        baseline=selection.baseline if selection.baseline in measured else None,
        budget_ms=selection.budget_ms,
        environments={str(k): v for k, v in environments.items()},
    )
    return snapshot, [key for key in selection.keys if key not in measured]


def _by_key(records: list[dict[str, Any]], keys: set[str]) -> dict[str, dict[str, Any]]:
    found = {}
    for record in records:
        key = result_key(
            record["job_id"], record["backend"], record["batch_size"], record["threads"]
        )
        if key in keys:
            found[key] = record
    return found


def _row(
    key: str,
    record: dict[str, Any],
    models: dict[int, dict[str, Any]],
    accuracy: dict[int, dict[str, Any]],
) -> ResultRow:
    model = models.get(record["model_id"] or -1, {})
    metrics, note = dict(record["metrics"]), "the original: the reference itself"
    if model.get("parent_id"):
        metrics, note = metrics | _accuracy_metrics(accuracy.get(record["model_id"])), ""
        report = accuracy.get(record["model_id"])
        note = (
            f"variant of #{model['parent_id']}; accuracy from optimize job "
            f"#{report['optimize_job']} on {report.get('data', '?')} data"
            if report
            else f"variant of #{model['parent_id']}; no accuracy report stored"
        )
    elif model:
        metrics |= REFERENCE
    return ResultRow(
        key=key,
        job_id=record["job_id"],
        model_id=record["model_id"],
        model=record["model_name"] or "deleted model",
        parent_id=model.get("parent_id"),
        precision=model.get("precision", ""),
        backend=record["backend"],
        batch_size=record["batch_size"],
        threads=record["threads"],
        environment_id=record["environment_id"],
        metrics=metrics,
        accuracy_note=note if model else "model deleted",
    )


def _accuracy_metrics(report: dict[str, Any] | None) -> dict[str, float | None]:
    if not report:
        return {}
    cosine = report.get("mean_cosine")
    return {
        "mean_cosine": cosine,
        "cosine_error": None if cosine is None else max(0.0, 1.0 - cosine),
        "max_abs_error": report.get("max_abs_error"),
        "top1_agreement": report.get("top1_agreement"),
        "top1_drop": report.get("top1_drop"),
    }


# -- share links ----------------------------------------------------------------------------


def share_snapshot(factory: sessionmaker[Session], snapshot: CompareSnapshot, *, owner: str) -> str:
    """Freeze `snapshot` behind a new token; returns the token."""
    with transaction(factory) as s:
        share = create_share(
            s, owner=owner, snapshot=snapshot.model_dump(mode="json"), title=snapshot.title
        )
        return share.token


def shared_snapshot(factory: sessionmaker[Session], token: str) -> CompareSnapshot | None:
    """The snapshot behind a live token; None for malformed, unknown, revoked or unreadable."""
    with transaction(factory) as s:
        share = open_share(s, token=token)
        data = share.snapshot if share is not None else None
    if data is None:
        return None
    try:
        return CompareSnapshot.model_validate(data)
    except ValidationError:
        return None


def owned_shares(factory: sessionmaker[Session], *, owner: str) -> list[dict[str, Any]]:
    with transaction(factory) as s:
        return [
            {
                "token": x.token,
                "title": x.title,
                "results": len(x.snapshot.get("rows", [])),
                "created": x.created_at,
                "revoked": x.revoked_at,
            }
            for x in list_shares(s, owner=owner)
        ]


def revoke(factory: sessionmaker[Session], *, token: str, owner: str) -> bool:
    with transaction(factory) as s:
        return revoke_share(s, token=token, owner=owner)


# -- export bundles -------------------------------------------------------------------------


def submit_export(factory: sessionmaker[Session], *, model_id: int, send: SendTask) -> int:
    """Commit an export job for the model (a worker writes the bundle), then send it."""
    return submit_job(
        factory, kind=JobKind.export, model_id=model_id, spec=ExportJobSpec(), send=send
    )


def export_rows(factory: sessionmaker[Session], *, limit: int = 10) -> list[dict[str, Any]]:
    """Finished export jobs, newest first, with the bundle's path when it is still there."""
    with transaction(factory) as s:
        jobs = [
            (job, EXPORT.read_result(job.result))
            for job in finished_jobs(s, kind=JobKind.export, limit=limit)
        ]
        return [
            {
                "job": job.id,
                "model": job.model.name if job.model else "deleted model",
                "message": job.message,
                "bundle": result.bundle if result else None,
                "size_bytes": result.size_bytes if result else 0,
            }
            for job, result in jobs
        ]
