"""What the Compare page and shared links do, as plain functions tests call without Streamlit.

A stored result is one (benchmark job, backend, batch size, threads), keyed
`job.backend.batch.threads` in the URL (`?results=12.onnxruntime.1.4,13.onnxruntime.1.4`).
The Pareto axes ride along when they are not the defaults (`&latency=p90_ms&quality=cer`): any
latency, and any accuracy metric a selected result has, a variant's task metrics included.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pandas as pd
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from optistudio.core.model.info import precision_label
from optistudio.core.optimize.provenance import data_label
from optistudio.core.report.labels import threads_text
from optistudio.core.report.metric_info import label_of, reference_value
from optistudio.core.report.snapshot import (
    DEFAULT_LATENCY,
    DEFAULT_QUALITY,
    CompareSnapshot,
    ResultRow,
    axis_choices,
    shown_precision,
)
from optistudio.db.models import JobKind, Model
from optistudio.db.queries import finished_jobs, job_results
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
from optistudio.services.jobresults import ExportJobResult
from optistudio.studio.compare_decoders import decoder_options, decoder_rows
from optistudio.studio.compare_lineage import with_lineage
from optistudio.studio.compare_variants import VARIANT_PATTERN, variant_options, variant_rows
from optistudio.studio.formatting import readable_frame
from optistudio.studio.job_view import JobView
from optistudio.studio.jobs_services import SendTask, job_view, submit_job

KEY_PATTERN = re.compile(r"(\d{1,12})\.([a-z0-9_]{1,32})\.(\d{1,6})\.(\d{1,4})")
METRIC_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,63}")
PARAM_RESULTS, PARAM_BASELINE, PARAM_BUDGET = "results", "baseline", "budget"
PARAM_LATENCY, PARAM_QUALITY = "latency", "quality"
REFERENCE = {
    "mean_cosine": 1.0,
    "min_cosine": 1.0,
    "cosine_error": 0.0,
    "max_abs_error": 0.0,
    "mean_abs_error": 0.0,
    "top1_agreement": 1.0,
}
"""An original is its own reference: exact by definition (and so on its variants' task
agreement metrics, see `reference_value`)."""
STORED_ACCURACY = (
    "mean_cosine",
    "min_cosine",
    "max_abs_error",
    "mean_abs_error",
    "top1_agreement",
    "top1_drop",
)
"""The generic figures of a stored accuracy report, by their field names."""


def result_key(job_id: int, backend: str, batch_size: int, threads: int) -> str:
    return f"{job_id}.{backend}.{batch_size}.{threads}"


@dataclass
class Selection:
    """What the URL asks to compare, and what in it could not be read."""

    keys: list[str] = field(default_factory=list)
    baseline: str | None = None
    budget_ms: float | None = None
    latency_metric: str = DEFAULT_LATENCY
    quality_metric: str = DEFAULT_QUALITY
    problems: list[str] = field(default_factory=list)
    chosen_axes: set[str] = field(default_factory=set, compare=False)
    """The axes the link names (PARAM_LATENCY, PARAM_QUALITY); the others follow the rows."""


def read_selection(params: Mapping[str, str]) -> Selection:
    """The selection in query parameters; malformed parts become problems, never errors."""
    selection = Selection()
    for part in filter(None, (params.get(PARAM_RESULTS) or "").split(",")):
        if not (KEY_PATTERN.fullmatch(part.strip()) or VARIANT_PATTERN.fullmatch(part.strip())):
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
    selection.chosen_axes = {name for name in (PARAM_LATENCY, PARAM_QUALITY) if params.get(name)}
    selection.latency_metric = _axis(params, PARAM_LATENCY, DEFAULT_LATENCY, selection.problems)
    selection.quality_metric = _axis(params, PARAM_QUALITY, DEFAULT_QUALITY, selection.problems)
    return selection


def _axis(params: Mapping[str, str], name: str, default: str, problems: list[str]) -> str:
    value = (params.get(name) or "").strip()
    if not value or METRIC_PATTERN.fullmatch(value):
        return value or default
    problems.append(
        f"{value[:40]!r} in the link is not a metric name; the {name} axis shows "
        f"{label_of(default)}."
    )
    return default


def write_selection(params: MutableMapping[str, str], selection: Selection) -> None:
    """Put the selection in query parameters (and drop the ones that are unset)."""
    wanted = {
        PARAM_RESULTS: ",".join(selection.keys),
        PARAM_BASELINE: selection.baseline or "",
        PARAM_BUDGET: f"{selection.budget_ms:g}" if selection.budget_ms else "",
        PARAM_LATENCY: ""
        if selection.latency_metric == DEFAULT_LATENCY
        else selection.latency_metric,
        PARAM_QUALITY: ""
        if selection.quality_metric == DEFAULT_QUALITY
        else selection.quality_metric,
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
        runs = run_precisions(s, job_ids=sorted({r["job_id"] for r in rows}))
        ops = op_histograms(s, ids={r["model_id"] for r in rows if r["model_id"]})
        variants = variant_options(s) | decoder_options(s)
    return variants | {
        result_key(r["job_id"], r["backend"], r["batch_size"], r["threads"]): (
            f"#{r['job_id']} {r['model_name'] or 'deleted model'} "
            f"[{_label(r['precision'], runs.get(r['job_id']), ops.get(r['model_id']))}] · "
            f"{r['backend']} · "
            f"{'video, max ' if r['kind'] == JobKind.video else ''}"
            f"batch {r['batch_size']} · {threads_text(r['threads'])}"
        )
        for r in rows
    }


def op_histograms(s: Session, *, ids: set[int]) -> dict[int, dict[str, int]]:
    """Each model's op histogram (what says a file is quantized already), by id."""
    if not ids:
        return {}
    query = select(Model.id, Model.info).where(Model.id.in_(ids))
    return {row.id: dict((row.info or {}).get("op_histogram") or {}) for row in s.execute(query)}


def _label(model: str | None, run: str | None, ops: dict[str, int] | None) -> str:
    """`shown_precision`, saying 'already quantized (QDQ)' for a file quantized as uploaded."""
    return shown_precision(precision_label(model, ops or {}), run)


def run_precisions(s: Session, *, job_ids: list[int]) -> dict[int, str]:
    """The compute precision each job's spec asked for (a benchmark's 'bf16'); fp32 where its
    kind has none (video)."""
    return {
        job_id: str(spec.get("precision") or "fp32")
        for job_id, (spec, _) in job_results(s, job_ids=job_ids).items()
    }


def build_snapshot(
    factory: sessionmaker[Session],
    selection: Selection,
    *,
    title: str = "Comparison",
) -> tuple[CompareSnapshot, list[str]]:
    """The selected results as a snapshot, and the keys that are not stored (deleted, unknown)."""
    benchmarks = [key for key in selection.keys if KEY_PATTERN.fullmatch(key)]
    job_ids = sorted({int(key.split(".", 1)[0]) for key in benchmarks})
    with transaction(factory) as s:
        measured = _by_key(stored_results(s, job_ids=job_ids), set(benchmarks))
        models = models_by_id(s, ids={r["model_id"] for r in measured.values() if r["model_id"]})
        parents = {m["parent_id"] for m in models.values() if m["parent_id"]}
        accuracy = variant_accuracy(s, original_ids=parents) if parents else {}
        originals = {i for i, m in models.items() if not m["parent_id"]}
        judged = {i: _task_metric_names(variant_accuracy(s, original_ids={i})) for i in originals}
        env_ids = {r["environment_id"] for r in measured.values() if r["environment_id"]}
        runs = run_precisions(s, job_ids=job_ids)
        ops = op_histograms(s, ids=set(models))
        timed = variant_rows(s, selection.keys)
        timed |= decoder_rows(s, [key for key in benchmarks if key not in measured])
        env_ids |= {r.environment_id for r in timed.values() if r.environment_id}
        environments = environments_by_id(s, ids=env_ids)
    for model_id, model in models.items():
        model["precision"] = precision_label(model["precision"], ops.get(model_id) or {})
    made = {
        key: _row(key, measured[key], models, accuracy, judged, runs.get(measured[key]["job_id"]))
        for key in selection.keys
        if key in measured
    }
    rows = [made.get(key) or timed[key] for key in selection.keys if key in made or key in timed]
    with transaction(factory) as s:
        rows = with_lineage(s, rows)
    snapshot = CompareSnapshot(
        title=title,
        created_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        rows=rows,
        baseline=selection.baseline if selection.baseline in {r.key for r in rows} else None,
        budget_ms=selection.budget_ms,
        latency_metric=selection.latency_metric,
        quality_metric=selection.quality_metric,
        environments={str(k): v for k, v in environments.items()},
    )
    return snapshot, [key for key in selection.keys if key not in made and key not in timed]


def fit_axes(snapshot: CompareSnapshot, selection: Selection) -> list[str]:
    """Put the selection's axes back to the defaults where the snapshot's results cannot be
    plotted on them (no result has the metric, or nothing says which way is better); the
    sentences say which and why. The snapshot follows the selection."""
    latency, quality = axis_choices(snapshot)
    _decoder_axes(snapshot, selection, latency, quality)
    problems = []
    for attribute, choices, default in (
        ("latency_metric", latency, DEFAULT_LATENCY),
        ("quality_metric", quality, DEFAULT_QUALITY),
    ):
        wanted = getattr(selection, attribute)
        if wanted not in choices:
            problems.append(
                f"No selected result has {wanted!r} as a metric with a better direction; the "
                f"chart shows {label_of(default)} instead."
            )
            setattr(selection, attribute, default)
    snapshot.latency_metric = selection.latency_metric
    snapshot.quality_metric = selection.quality_metric
    return problems


def _decoder_axes(
    snapshot: CompareSnapshot, selection: Selection, latency: list[str], quality: list[str]
) -> None:
    """Where every row is a decoder's and the link names no axis, plot perplexity increase
    against time per token: the figures a decoder is judged and timed by."""
    rows = snapshot.rows
    if not rows or not all(row.metrics.get("tokens_per_s") is not None for row in rows):
        return
    if PARAM_LATENCY not in selection.chosen_axes and "ms_per_token_p50" in latency:
        selection.latency_metric = "ms_per_token_p50"
    if PARAM_QUALITY not in selection.chosen_axes and "perplexity_increase" in quality:
        selection.quality_metric = "perplexity_increase"


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
    judged: dict[int, set[str]],
    run_precision: str | None = None,
) -> ResultRow:
    model = models.get(record["model_id"] or -1, {})
    metrics, note = dict(record["metrics"]), "the original: the reference itself"
    report: dict[str, Any] | None = None
    if model.get("parent_id"):
        metrics, note = metrics | _accuracy_metrics(accuracy.get(record["model_id"])), ""
        report = accuracy.get(record["model_id"])
        note = (
            f"variant of #{model['parent_id']}; accuracy from optimize job "
            f"#{report['optimize_job']} on {data_label(report.get('data'))}"
            if report
            else f"variant of #{model['parent_id']}; no accuracy report stored"
        )
    elif model:
        metrics |= REFERENCE | _reference_task_metrics(judged.get(record["model_id"], set()))
    return ResultRow(
        key=key,
        job_id=record["job_id"],
        model_id=record["model_id"],
        model=record["model_name"] or "deleted model",
        parent_id=model.get("parent_id"),
        precision=shown_precision(model.get("precision"), run_precision),
        backend=record["backend"],
        batch_size=record["batch_size"],
        threads=record["threads"],
        environment_id=record["environment_id"],
        metrics=metrics,
        accuracy_note=note if model else "model deleted",
        task=(report or {}).get("task") if model.get("parent_id") else None,
        disagreements=list((report or {}).get("worst") or []) if model.get("parent_id") else [],
    )


def _accuracy_metrics(report: dict[str, Any] | None) -> dict[str, float | None]:
    """A variant's stored accuracy figures by metric name: the generic ones, the error the
    table shows (1 - mean cosine), and every task metric its evaluator measured."""
    if not report:
        return {}
    figures: dict[str, float | None] = {name: report.get(name) for name in STORED_ACCURACY}
    cosine = figures["mean_cosine"]
    figures["cosine_error"] = None if cosine is None else max(0.0, 1.0 - cosine)
    return figures | dict(report.get("task_metrics") or {})


def _task_metric_names(reports: dict[int, dict[str, Any]]) -> set[str]:
    return {name for report in reports.values() for name in report.get("task_metrics") or {}}


def _reference_task_metrics(names: set[str]) -> dict[str, float | None]:
    """The original's own score on its variants' task agreement metrics (1 for agreement, 0
    for an error rate); metrics against labels are left out: the original is no exact reference
    for those."""
    values = {name: reference_value(name) for name in names}
    return {name: value for name, value in values.items() if value is not None}


def comparison_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The head-to-head runs as the page lists them: the ratio, its interval and the verdict."""
    return readable_frame(
        {
            "job": r["job"],
            "A": r["A"],
            "B": r["B"],
            "batch": r["batch"],
            "runs on": r.get("runs"),
            "B/A ratio": None if r["ratio"] is None else round(r["ratio"], 4),
            "95 % interval": _interval(r["low"], r["high"]),
            "verdict": r["verdict"] + (", contended" if r["contended"] else ""),
            "pairs": r["pairs"],
        }
        for r in rows
    )


def _interval(low: float | None, high: float | None) -> str | None:
    return None if low is None or high is None else f"{low:.3f} – {high:.3f}"


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


def export_rows(
    factory: sessionmaker[Session], *, limit: int = 10
) -> list[JobView[ExportJobResult]]:
    """Finished export jobs, newest first, each with its result (the bundle's path and size;
    None if it no longer reads)."""
    with transaction(factory) as s:
        return [
            job_view(job, EXPORT.read_result(job.result))
            for job in finished_jobs(s, kind=JobKind.export, limit=limit)
        ]
