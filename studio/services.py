"""What the studio does, as plain functions that tests call without Streamlit.

The studio never runs a model: it stores uploads, commits job rows and sends tasks by name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel
from sqlalchemy import func, select
from sqlalchemy.orm import Session, joinedload, sessionmaker

from optistudio.core.backends.inventory import int8_mode, pick_queue, targets, trains_on
from optistudio.core.errors import ErrorCode, ErrorInfo, NoWorkerForTarget, OptistudioError
from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.core.metrics import METRICS
from optistudio.core.model.info import ModelInfo
from optistudio.db.models import Job, JobKind, JobStatus, Model
from optistudio.db.queries import (
    create_job,
    finish_job,
    finished_comparisons,
    get_job,
    job_results,
    list_jobs,
    list_models,
    list_workers,
    live_workers,
    release_orphaned_jobs,
    request_cancel,
    results_rows,
    set_task_id,
)
from optistudio.db.session import transaction
from optistudio.services.artifact_store import store_for
from optistudio.services.job_errors import error_columns
from optistudio.services.jobkinds import (
    BENCHMARK,
    COMPARE,
    JOB_KINDS,
    TRAINING_ORDER,
    CompareJobSpec,
)
from optistudio.services.jobresults import BenchmarkJobResult, CompareJobResult
from optistudio.services.settings import Settings

log = logging.getLogger(__name__)

SendTask = Callable[[str, list[Any]], str]
"""Sends a task by name with its arguments; returns the broker's task id."""

BROKER_DOWN = ErrorInfo(
    code=ErrorCode.broker_unavailable,
    message="Could not reach the job queue, so the job was not started.",
    hint="Is the worker stack running? Start it with `make up` (or `optistudio up`).",
)


def submit_benchmark(
    factory: sessionmaker[Session], *, model_id: int, spec: BenchmarkSpec, send: SendTask
) -> int:
    """Commit a benchmark job, then send its id to the workers; returns the job id."""
    return submit_job(factory, kind=JobKind.benchmark, model_id=model_id, spec=spec, send=send)


def submit_comparison(
    factory: sessionmaker[Session], *, spec: CompareJobSpec, baseline_id: int, send: SendTask
) -> int:
    """Commit an interleaved A/B comparison job (A = baseline), then send it."""
    return submit_job(factory, kind=JobKind.compare, model_id=baseline_id, spec=spec, send=send)


def route(
    factory: sessionmaker[Session],
    *,
    backend: str,
    device: str,
    max_age_s: float,
    suits: Callable[[dict[str, Any]], int] | None = None,
) -> str:
    """The queue of a live worker offering `backend` on `device` (the one `suits` ranks first,
    else the first); refuse clearly if none."""
    with transaction(factory) as s:
        workers = [
            (w.hostname, w.queues, w.inventory) for w in live_workers(s, max_age_s=max_age_s)
        ]
    live = [(queues, inventory) for _hostname, queues, inventory in workers]
    queue = pick_queue(live, backend=backend, device=device, suits=suits)
    if queue is not None:
        return queue
    if not workers:
        raise NoWorkerForTarget(
            "No worker is running, so the job cannot be started.",
            hint="Start the stack with `make up`, or add a worker with `optistudio worker`.",
        )
    raise NoWorkerForTarget(
        f"No live worker offers {backend} on {device}. Workers now: "
        + "; ".join(_offer_summary(host, inventory) for host, _, inventory in workers)
        + ".",
        hint="Pick one of those targets, or start a worker on a machine that has it."
        + _why_missing(backend, [inventory for _, _, inventory in workers]),
    )


def _why_missing(backend: str, inventories: list[dict[str, Any]]) -> str:
    """What a worker said about `backend` it cannot run (e.g. litert: the extra to install)."""
    reasons = sorted(
        {
            entry["reason"]
            for inventory in inventories
            if (entry := inventory.get("backends", {}).get(backend)) and not entry["available"]
        }
    )
    return f" {backend} on the workers now: {reasons[0]}." if reasons else ""


def qat_places(factory: sessionmaker[Session], *, max_age_s: float) -> str:
    """One sentence: where quantization-aware training would run among the live workers."""
    with transaction(factory) as s:
        found = [
            (w.hostname, trains_on(w.inventory), w.inventory)
            for w in live_workers(s, max_age_s=max_age_s)
        ]
    able = sorted(
        (
            TRAINING_ORDER.get(device, len(TRAINING_ORDER)),
            f"{host} ({device.upper() if device == 'cuda' else 'CPU'}, torch {inv['training']['torch']})",
        )
        for host, device, inv in found
        if device
    )
    if not found:
        return "No worker is running: start one to train."
    if not able:
        return (
            "No live worker can train: install the qat extra on a worker "
            "(pip install 'optistudio[qat]', the CPU wheel of torch 2.13) and restart it."
        )
    return "QAT trains on " + ", ".join(place for _, place in able) + " (the first is preferred)."


def live_targets(
    factory: sessionmaker[Session], *, max_age_s: float, info: ModelInfo | None = None
) -> list[tuple[str, str, str]]:
    """(backend, device, precision) that some live worker runs, ONNX Runtime CPU FP32 first.

    With `info`, int8 targets are listed only for a quantized model: an FP32 model "run in
    int8" would run in FP32 (or be refused), which helps nobody.
    """
    with transaction(factory) as s:
        inventories = [w.inventory for w in live_workers(s, max_age_s=max_age_s)]
    found = {target for inventory in inventories for target in targets(inventory)}
    if info is not None and not info.quantized:
        found = {t for t in found if t[2] != "int8"}
    reference = ("onnxruntime", "cpu", "fp32")
    return sorted(found, key=lambda t: (t != reference, t[1], t[0], t[2]))


def _offer_summary(hostname: str, inventory: dict[str, Any]) -> str:
    offered = [
        f"{name} ({', '.join(entry['devices'])})"
        for name, entry in inventory.get("backends", {}).items()
        if entry.get("available")
    ]
    return f"{hostname}: {', '.join(offered) or 'nothing available'}"


def worker_rows(factory: sessionmaker[Session], *, max_age_s: float) -> list[dict[str, Any]]:
    """Every worker seen, with live / stale / stopped and what it offers."""
    now = datetime.now(UTC)
    with transaction(factory) as s:
        rows = []
        for worker in list_workers(s):
            age = (now - worker.heartbeat_at).total_seconds()
            state = "stopped" if worker.stopped_at else ("live" if age <= max_age_s else "stale")
            rows.append(
                {
                    "worker": worker.hostname,
                    "state": state,
                    "queues": ", ".join(worker.queues),
                    "last heartbeat (s ago)": round(age, 1),
                    "offers": _offer_summary(worker.hostname, worker.inventory).split(": ", 1)[1],
                    "cpu": worker.inventory.get("cpu", {}).get("model", ""),
                    "isa": " ".join(worker.inventory.get("cpu", {}).get("isa_flags", [])),
                    "int8": int8_mode(worker.inventory).label(),
                    "gpus": _gpu_summary(worker.inventory.get("gpus", [])),
                    "unavailable": "; ".join(
                        f"{name}: {entry['reason']}"
                        for name, entry in worker.inventory.get("backends", {}).items()
                        if not entry.get("available")
                    ),
                }
            )
        return rows


def _gpu_summary(gpus: list[dict[str, Any]]) -> str:
    if not gpus:
        return "none"
    return ", ".join(
        f"cuda:{gpu['index']} {gpu['name']} ({gpu['memory_mib'] / 1024:.0f} GiB, driver "
        f"{gpu['driver']})"
        for gpu in gpus
    )


def submit_job(
    factory: sessionmaker[Session],
    *,
    kind: JobKind,
    model_id: int,
    spec: BaseModel,
    send: SendTask,
) -> int:
    """Commit the job row first, then send only its id; a broker that is down fails the job."""
    info = JOB_KINDS[kind]
    with transaction(factory) as s:
        job_id = create_job(s, kind=kind, spec=info.dump_spec(spec), model_id=model_id).id
    try:
        task_id = send(info.task_name, [job_id])
    except Exception:
        log.exception("could not send job %s to the broker", job_id)
        with transaction(factory) as s:
            finish_job(s, job_id=job_id, status=JobStatus.failed, **error_columns(BROKER_DOWN))
        return job_id
    with transaction(factory) as s:
        set_task_id(s, job_id=job_id, task_id=task_id)
    return job_id


def data_version(factory: sessionmaker[Session]) -> tuple[Any, ...]:
    """A stamp of what the pages list, from one cheap query: the jobs' count, newest id, latest
    start and finish, and the models' count and newest id. It changes when a job is submitted,
    starts or ends and when a model is added or removed, so a read cached under it is fresh."""
    with transaction(factory) as s:
        jobs = s.execute(
            select(
                func.count(Job.id),
                func.max(Job.id),
                func.max(Job.started_at),
                func.max(Job.finished_at),
            )
        ).one()
        models = s.execute(select(func.count(Model.id), func.max(Model.id))).one()
    return (*jobs, *models)


def jobs_of(
    s: Session,
    *,
    kind: JobKind,
    model_id: int | None = None,
    status: JobStatus | None = None,
    limit: int = 20,
) -> list[Job]:
    """The newest `limit` jobs of `kind` (of one model, in one status, when given), with their
    model loaded: filtered in the query, so a page reads only the rows it shows.

    (A query function that belongs with `optistudio.db.queries.finished_jobs`, which filters
    by kind only; kept here until db grows its model filter.)"""
    query = select(Job).options(joinedload(Job.model)).where(Job.kind == kind)
    if model_id is not None:
        query = query.where(Job.model_id == model_id)
    if status is not None:
        query = query.where(Job.status == status)
    return list(s.scalars(query.order_by(Job.id.desc()).limit(limit)))


def finished_of(
    s: Session, *, kind: JobKind, model_id: int | None = None, limit: int = 50
) -> list[Job]:
    """Succeeded jobs of `kind` (of one model when given), newest first."""
    return jobs_of(s, kind=kind, model_id=model_id, status=JobStatus.succeeded, limit=limit)


def recent_jobs(
    factory: sessionmaker[Session], *, kind: JobKind, model_id: int | None = None, limit: int = 20
) -> list[dict[str, Any]]:
    """Recent jobs of `kind` (any status), newest first, with their result (the kind's result
    model; None while it has none, or if it no longer reads)."""
    with transaction(factory) as s:
        jobs = jobs_of(s, kind=kind, model_id=model_id, limit=limit)
        return [
            {
                "job": job.id,
                "model": job.model.name if job.model else "",
                "model_id": job.model_id,
                "status": job.status.value,
                "progress": float(job.progress or 0.0),
                "message": job.message or "",
                "error_code": job.error_code,
                "error_hint": job.error_hint,
                "result": JOB_KINDS[job.kind].read_result(job.result),
            }
            for job in jobs
        ]


def comparison_rows(factory: sessionmaker[Session], *, limit: int = 50) -> list[dict[str, Any]]:
    """Finished comparisons, newest first, as flat rows for a table and a chart."""
    with transaction(factory) as s:
        stored = [
            (job, COMPARE.read_result(job.result)) for job in finished_comparisons(s, limit=limit)
        ]
        return [_comparison_row(job, result) for job, result in stored if result is not None]


def _comparison_row(job: Job, result: CompareJobResult) -> dict[str, Any]:
    return {
        "job": job.id,
        "A": f"#{job.model_id} {job.model.name if job.model else ''}",
        "B": f"#{result.candidate_model_id} {result.candidate_name}".strip(),
        "ratio": result.ratio,
        "low": result.low,
        "high": result.high,
        "verdict": result.verdict,
        "pairs": result.pairs,
        "batch": result.batch_size,
        "sentence": result.sentence,
        "margin": result.margin,
        "contended": bool(result.contention and result.contention.contended),
    }


def cancel_job(
    factory: sessionmaker[Session], *, job_id: int, revoke: Callable[[str], None]
) -> str:
    """Cancel a queued job at once, or ask a running one to stop; returns what happened."""
    with transaction(factory) as s:
        before = get_job(s, job_id=job_id)
        if before is None:
            return f"Job {job_id} does not exist."
        if before.is_terminal:
            return f"Job {job_id} had already finished ({before.status.value})."
        job = request_cancel(s, job_id=job_id)
        assert job is not None
        status, task_id = job.status, job.celery_task_id
    if status == JobStatus.cancelled and task_id:
        revoke(task_id)  # a queued message is dropped by the worker instead of claimed
    if status == JobStatus.cancelled:
        return f"Job {job_id} is cancelled."
    return f"Job {job_id} will stop at its next checkpoint."


def check_workers(factory: sessionmaker[Session], *, max_age_s: float) -> int:
    """How many workers are live. With none, jobs whose worker died come off "running" here
    (``optistudio.db.queries.release_orphaned_jobs``): no worker is there to notice until one starts."""
    with transaction(factory) as s:
        release_orphaned_jobs(s, max_age_s=max_age_s)
        return len(live_workers(s, max_age_s=max_age_s))


def job_rows(factory: sessionmaker[Session], *, limit: int = 200) -> list[dict[str, Any]]:
    with transaction(factory) as s:
        return [_job_row(job) for job in list_jobs(s, limit=limit)]


def _job_row(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "kind": JOB_KINDS[job.kind].label,
        "model": job.model.name if job.model else "",
        "model_id": job.model_id,
        "status": job.status.value,
        "progress": float(job.progress or 0.0),
        "message": job.message or "",
        "error_code": job.error_code,
        "error_hint": job.error_hint,
        "cancel_requested": bool(job.cancel_requested),
        "created_at": job.created_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "worker": job.worker or "",
        "attempts": job.attempts,
    }


def model_choices(factory: sessionmaker[Session]) -> list[dict[str, Any]]:
    with transaction(factory) as s:
        return [
            {
                "id": m.id,
                "name": m.name,
                "sha256": m.sha256,
                "path": m.path,
                "size_bytes": m.size_bytes,
                "info": m.info,
                "source": m.source,
                "parent_id": m.parent_id,
                "task": m.task,
                "created_at": m.created_at,
            }
            for m in list_models(s)
        ]


def model_file(settings: Settings, *, path: str, sha256: str) -> Path | None:
    """A stored model's file on this machine (for reading its graph, never to run it), or None
    when the artifact store cannot give it; why is logged."""
    try:
        return store_for(settings).local_model(path, sha256)
    except OptistudioError as exc:
        log.info("model file %s not readable here: %s", path, exc.message)
        return None


RESULT_KEYS = ["job_id", "model_id", "model_name", "backend", "batch_size", "threads"]


def results_frame(factory: sessionmaker[Session], *, model_id: int | None = None) -> pd.DataFrame:
    """One row per (job, backend, batch size, threads) with a column per metric."""
    with transaction(factory) as s:
        rows = results_rows(s, model_id=model_id)
    if not rows:
        return pd.DataFrame(columns=[*RESULT_KEYS, "p50_ms", "p99_ms", "throughput"])
    long = pd.DataFrame(rows)
    wide = long.pivot_table(index=[*RESULT_KEYS, "finished_at"], columns="metric", values="value")
    wide = wide.reset_index().sort_values(["job_id", "batch_size"], ascending=[False, True])
    wide.columns.name = None
    with transaction(factory) as s:
        jobs = job_results(s, job_ids=[int(i) for i in wide["job_id"].unique()])
    targets = {job_id: _target_of(spec, result) for job_id, (spec, result) in jobs.items()}
    for column in ("device", "precision", "outputs"):
        wide[column] = [targets.get(int(j), {}).get(column, "") for j in wide["job_id"]]
    return wide


def _target_of(spec: dict[str, Any], result: dict[str, Any]) -> dict[str, str]:
    """Device, precision and the output check's verdict of a benchmark job."""
    stored = BENCHMARK.read_result(result)
    target = stored.target if stored is not None else BENCHMARK.parse_spec(spec)
    return {"device": target.device, "precision": target.precision, "outputs": _outputs(stored)}


def _outputs(result: BenchmarkJobResult | None) -> str:
    """The output check's verdict: agree, DISAGREE, the reference itself, or not checked."""
    if result is None or "output_check" not in result.model_fields_set:
        return "not checked"
    check = result.output_check
    if check is None:
        return "reference"
    if check.passed:
        worst = min((float(o["cosine_min"]) for o in check.outputs.values()), default=1.0)
        return f"agree (cos {worst:.5f})"
    return "DISAGREE: " + "; ".join(check.problems)


def side_by_side(wide: pd.DataFrame) -> pd.DataFrame:
    """The latest run of each target (backend, device, precision), one row each."""
    if wide.empty:
        return wide
    latest = wide.sort_values("job_id", ascending=False).drop_duplicates(
        ["backend", "device", "precision", "batch_size"]
    )
    rows = []
    for (backend, device, precision), group in latest.groupby(
        ["backend", "device", "precision"], sort=True
    ):
        first = group.sort_values("batch_size").iloc[0]
        best = group.loc[group["throughput"].idxmax()]
        rows.append(
            {
                "target": f"{backend} · {device} · {precision}",
                "job": int(first["job_id"]),
                f"p50 at batch {int(first['batch_size'])} (ms)": round(first["p50_ms"], 3),
                "p99 (ms)": round(first["p99_ms"], 3),
                "best throughput (/s)": round(best["throughput"], 1),
                "at batch": int(best["batch_size"]),
                "outputs vs ORT FP32 CPU": first["outputs"],
            }
        )
    return pd.DataFrame(rows)


def display_table(wide: pd.DataFrame) -> pd.DataFrame:
    """The results table as people read it: units in headers, spread beside p50, a verdict."""
    table = pd.DataFrame(
        {
            "job": wide["job_id"],
            "model": wide["model_name"],
            "backend": wide["backend"],
            "device": wide.get("device", "cpu"),
            "precision": wide.get("precision", "fp32"),
            "batch": wide["batch_size"],
            "threads": wide["threads"],
        }
    )
    table["p50 (ms)"] = [
        f"{p50:.3f} ± {(p90 - p10) / 2:.3f}"
        for p50, p10, p90 in zip(
            wide["p50_ms"],
            wide.get("p10_ms", wide["p50_ms"]),
            wide.get("p90_ms", wide["p50_ms"]),
            strict=True,
        )
    ]
    for metric in ("p90_ms", "p95_ms", "p99_ms", "mean_ms", "throughput", "peak_rss_mb"):
        if metric in wide:
            spec = METRICS[metric]
            label = spec.label.removesuffix(" latency")
            table[f"{label} ({spec.unit})"] = wide[metric].round(3)
    if "samples" in wide:
        table["runs"] = wide["samples"].astype(int)
    verdicts = [verdict(row) for _, row in wide.iterrows()]
    # Beside the target, ahead of the figures: at the far right a wide table hid 'contended'.
    table.insert(table.columns.get_loc("threads") + 1, "verdict", verdicts)
    if "outputs" in wide:
        table["outputs"] = wide["outputs"]
    return table.reset_index(drop=True)


def verdict(row: pd.Series) -> str:
    """'stable', 'unstable', with ', contended' when other processes competed for the CPU."""
    words = ["stable" if row.get("stable", 0.0) >= 0.5 else "unstable"]
    if row.get("contended", 0.0) >= 0.5:
        words.append(f"contended ({row.get('other_cores', 0.0):.1f} cores busy elsewhere)")
    return ", ".join(words)
