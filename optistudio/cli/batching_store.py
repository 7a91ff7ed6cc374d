"""`optistudio batching latency-profile|recommend|verify` results stored as the studio stores them.

With `--save` (the file stored as a model first, as `bench --save` does), or always when MODEL
is a stored model's id, each run is recorded as the studio's Batching page records it: a job
row of kind batching_profile (a profile; `recommend` adds its recommendation to the profile it
searched) or batching_verify (the setting served and what it measured), run through the
worker's `run_job` so a failure is recorded on the row too. An export of the model then takes
its serving setting from them (`optistudio.core.batching.serving_choice`).
"""

from __future__ import annotations

import argparse
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optistudio.core.errors import InvalidSpec

SAVE_HELP = (
    "store the results as the studio does (a stored model id always does), where "
    "`optistudio export` takes its serving setting from"
)


@dataclass(frozen=True)
class StoredModel:
    """The stored model a batching command's results are recorded on."""

    factory: Any
    model_id: int


def stored_model(args: argparse.Namespace) -> StoredModel | None:
    """Where the command's results go: MODEL given as a stored id (args.model becomes its
    file), or --save (the file, as the command runs it, stored as a model); None otherwise."""
    model_id = _model_id(args.model)
    if model_id is None and not args.save:
        return None
    from optistudio.cli.args import input_options
    from optistudio.db.session import make_session_factory
    from optistudio.services.catalog import add_model_file
    from optistudio.services.migrate import upgrade
    from optistudio.services.settings import get_settings

    settings = get_settings()
    upgrade(settings.database_url, lock_dir=settings.data_dir)
    factory = make_session_factory(settings.database_url)
    if model_id is not None:
        args.model = _model_file(factory, settings, model_id)
        return StoredModel(factory, model_id)
    input_options(args)  # first: --free-dims makes args.model the copy that runs
    entry = add_model_file(factory, settings, args.model, name=args.model.stem, origin="cli")
    return StoredModel(factory, entry.model_id)


def _model_id(model: Path) -> int | None:
    """A model id: digits that name no file here."""
    text = str(model)
    return int(text) if text.isdigit() and not model.exists() else None


def _model_file(factory: Any, settings: Any, model_id: int) -> Path:
    from optistudio.db.queries import get_model
    from optistudio.db.session import transaction
    from optistudio.services.artifact_store import store_for
    from optistudio.services.bundles import HELP_IDS

    with transaction(factory) as s:
        model = get_model(s, model_id=model_id)
        if model is None:
            raise InvalidSpec(f"No model #{model_id} is stored.", hint=HELP_IDS)
        address, sha256 = model.path, model.sha256
    return store_for(settings).local_model(address, sha256)


def recorded(
    stored: StoredModel | None,
    kind: Any,
    spec: Callable[[], Any],
    measure: Callable[[], Any],
    describe: Callable[[Any], tuple[str, Any, Any]],
) -> tuple[Any, dict[str, int] | None]:
    """`measure()`, and with a stored model, run as a job of `kind` (a JobKind) as a worker
    runs one, its spec `spec()` and its outcome `describe(measured)` (message, the kind's
    result, environment or None) stored on the row; the job's own error is raised again when
    it fails. Returns what was measured and the stored ids (None when nothing is stored)."""
    if stored is None:
        return measure(), None
    from optistudio.cli.errors import job_failure
    from optistudio.db.models import JobStatus
    from optistudio.db.queries import create_job, get_job
    from optistudio.db.session import transaction
    from optistudio.services.jobkinds import JOB_KINDS
    from optistudio.workers.jobs import run_job
    from optistudio.workers.outcome import Done, store

    info, measured = JOB_KINDS[kind], []
    with transaction(stored.factory) as s:
        job_id = create_job(
            s, kind=kind, spec=spec().model_dump(mode="json"), model_id=stored.model_id
        ).id

    def run(job: Any, context: Any) -> tuple[str, int | None]:
        measured.append(measure())
        message, result, environment = describe(measured[0])
        return message, store(context.factory, job.id, info, Done(message, result, environment))

    worker = f"cli@{socket.gethostname()}"
    run_job(stored.factory, job_id, worker=worker, task_id=None, work=run)
    with transaction(stored.factory) as s:
        job = get_job(s, job_id=job_id)
        if job is None or job.status != JobStatus.succeeded:
            raise job_failure(job, job_id)
    return measured[0], {"model_id": stored.model_id, "job_id": job_id}


def profile_spec(args: argparse.Namespace, settings: Any) -> Any:
    """The batching_profile spec the CLI's flags amount to."""
    from optistudio.cli.args import input_options
    from optistudio.core.batching.specs import LatencyProfileSpec

    inputs = input_options(args).model_inputs.model_dump(mode="json")
    return LatencyProfileSpec.model_validate(
        inputs
        | {
            "backend": args.backend,
            "max_batch_size": settings.max_batch_size,
            "threads": args.threads,
            "spin_wait": args.spin,
            "probe_time_scale": probe_time_scale(args),
        }
    )


def probe_time_scale(args: argparse.Namespace) -> float:
    """The serving probes' length --quick asks for (a share of the full length)."""
    from optistudio.core.batching.latency import QUICK_PROBE_SCALE

    return QUICK_PROBE_SCALE if args.quick else 1.0


def verify_spec(args: argparse.Namespace, settings: Any) -> Any:
    """The batching_verify spec the CLI's flags amount to."""
    from optistudio.cli.args import input_options
    from optistudio.core.batching.specs import BatchingVerifySpec

    inputs = input_options(args).model_inputs.model_dump(mode="json")
    return BatchingVerifySpec.model_validate(
        inputs
        | {
            "backend": args.backend,
            "settings": settings.model_dump(mode="json"),
            "process": args.process,
            "rate": args.rate,
            "clients": args.clients,
            "seconds": args.seconds,
            "threads": args.threads,
            "spin_wait": args.spin,
            "seed": args.seed,
        }
    )


def profile_result(
    profile: Any,
    max_batch_size: int,
    advice: Any = None,
    *,
    budget_ms: float | None = None,
    rate: float | None = None,
) -> tuple[str, Any, Any]:
    """A profile (with `recommend`'s advice on it, searched under `budget_ms` at `rate`) as
    the job stores it."""
    from optistudio.services.jobresults import LatencyProfileJobResult, StoredRecommendation

    ceiling, best = profile.ceiling(max_batch_size)
    recommendation = (
        StoredRecommendation(
            settings=advice.settings,
            feasible=advice.feasible,
            reason=advice.reason,
            p99_budget_ms=budget_ms,
            rate=rate,
        )
        if advice is not None and budget_ms is not None
        else None
    )
    result = LatencyProfileJobResult(
        profile=profile, ceiling=ceiling, best_batch=best, recommendation=recommendation
    )
    message = (
        f"Timed batch sizes {profile.batch_sizes} (optistudio batching): up to {ceiling:.1f} "
        f"req/s per instance at batch {best}."
    )
    if advice is not None:
        message += f" Recommended: {advice.reason}"
    return message, result, profile.environment


def verify_result(run: Any, settings: Any) -> tuple[str, Any, Any]:
    """A measured run as the job stores it (no prediction: the CLI judges against --profile)."""
    from optistudio.core.batching.results import p99_halves
    from optistudio.core.batching.trace import handoff_ms, runner_summary
    from optistudio.services.jobresults import BatchingVerifyJobResult, VerifyBatches
    from optistudio.workers.batching_jobs import request_samples

    result = BatchingVerifyJobResult(
        measured=run.result,
        requests=request_samples(run),
        errors=run.errors,
        p99_halves_ms=p99_halves(run.latency_ms),
        batches=VerifyBatches(
            runner=runner_summary(run.batches), handoff_ms=handoff_ms(run.batches)
        ),
    )
    measured = run.result
    message = (
        f"Measured on {settings.instances} instance(s) (optistudio batching verify): "
        f"{measured.throughput:.1f} req/s, p50 {measured.p50_ms:.1f} ms, p99 "
        f"{measured.p99_ms:.1f} ms, mean batch {measured.mean_batch_size:.2f}."
    )
    return message, result, None
