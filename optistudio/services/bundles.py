"""What a bundle holds, gathered from the database for `optistudio.core.report.bundle` (CLI and export job)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from optistudio.core.backends.inventory import offers
from optistudio.core.batching.serving_choice import StoredSetting, choose_serving
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.errors import InvalidSpec
from optistudio.core.model.info import ModelInfo
from optistudio.core.report.bundle import TENSORRT_SKIPPED, BundleSource
from optistudio.core.report.litert import PRECISIONS as LITERT_PRECISIONS
from optistudio.db.models import Job, JobKind
from optistudio.db.queries import finished_jobs, get_model, list_workers, newest_succeeded
from optistudio.db.selection import stored_results, variant_origin
from optistudio.db.session import transaction
from optistudio.services.artifact_store import store_for
from optistudio.services.input_profiles import profile_of
from optistudio.services.jobkinds import BATCHING_VERIFY, LATENCY_PROFILE
from optistudio.services.jobresults import StoredRecommendation
from optistudio.services.settings import Settings

LOOKBACK = 200
"""Finished profile jobs searched for the model's recommendation."""
HELP_IDS = (
    "Model ids are printed by `optistudio optimize --save` (each variant's model_id) and "
    "`optistudio bench --save`; the studio's Models page lists them too."
)


def bundle_source(
    factory: sessionmaker[Session], settings: Settings, model_id: int
) -> BundleSource:
    """Everything the database knows about the model, gathered for `optistudio.core.report.bundle`."""
    with transaction(factory) as s:
        model = get_model(s, model_id=model_id)
        if model is None:
            raise InvalidSpec(f"No model #{model_id} is stored.", hint=HELP_IDS)
        origin = (
            variant_origin(s, model_id=model.id, parent_id=model.parent_id)
            if model.parent_id
            else None
        )
        parent = get_model(s, model_id=model.parent_id) if model.parent_id else None
        benchmarks = stored_results(s, model_id=model.id)
        inventories = [(w.hostname, w.inventory) for w in list_workers(s) if not w.stopped_at]
        address, sha256 = model.path, model.sha256
        info, name = ModelInfo.model_validate(model.info), model.name
        precision, recipe = model.precision, model.recipe
        backend, threads = model.backend or None, model.threads
        profile = profile_of(s, model).model_dump(mode="json")
        serving = serving_setting(s, model_id=model.id)
        parent_card = (
            {"id": parent.id, "name": parent.name, "sha256": parent.sha256} if parent else None
        )
    path = store_for(settings).local_model(address, sha256)
    spec = (origin or {}).get("spec") or {}
    return BundleSource(
        name=name,
        model_path=path,
        info=info,
        precision=precision,
        recipe=recipe,
        reproduce=_reproduce(parent_card, origin, recipe),
        accuracy=((origin or {}).get("variant") or {}).get("accuracy"),
        benchmarks=benchmarks,
        preprocessing=spec.get("image_preprocessing"),
        batch_sizes=sorted({r["batch_size"] for r in benchmarks}),
        tensorrt_note=_tensorrt_note(inventories),
        input_profile=profile,
        litert_precisions=list(LITERT_PRECISIONS),  # made where the litert extra is installed
        serving=serving,
        backend=backend,
        threads=threads,
    )


def serving_setting(s: Session, *, model_id: int) -> dict[str, Any]:
    """The setting the model's bundle serves (`serving_choice.choose_serving`): its newest
    successful Verify's, else the newest recommendation stored on a profile, else the newest
    profile's ceiling batch, else the default."""
    verify = newest_succeeded(s, kind=JobKind.batching_verify, model_id=model_id)
    verified = _verified(verify) if verify is not None else None
    profiles = [
        (job.id, LATENCY_PROFILE.read_result(job.result))
        for job in finished_jobs(s, kind=JobKind.latency_profile, limit=LOOKBACK)
        if job.model_id == model_id
    ]
    recommended = next(
        (
            StoredSetting(job, result.recommendation.settings, _advice(result.recommendation))
            for job, result in profiles
            if result is not None and result.recommendation is not None
        ),
        None,
    )
    profiled = next(
        (
            (job, result.best_batch)
            for job, result in profiles
            if result is not None and result.best_batch is not None
        ),
        None,
    )
    return choose_serving(verified, recommended, profiled)


def _verified(job: Job) -> StoredSetting | None:
    """The setting a Verify served, with what it measured; None for a row without one."""
    settings = (job.spec or {}).get("settings")
    if not settings:
        return None
    result = BATCHING_VERIFY.read_result(job.result)
    said = (
        f"{result.measured.throughput:.1f} req/s, p99 {result.measured.p99_ms:.1f} ms"
        if result is not None
        else ""
    )
    return StoredSetting(job.id, BatchingSettings.model_validate(settings), said)


def _advice(recommendation: StoredRecommendation) -> str:
    rate = f"{recommendation.rate:g} req/s" if recommendation.rate else "max throughput"
    kept = "" if recommendation.feasible else ", not kept by any setting"
    return f"p99 budget {recommendation.p99_budget_ms:g} ms at {rate}{kept}"


def _reproduce(
    parent: dict[str, Any] | None, origin: dict[str, Any] | None, recipe: dict[str, Any] | None
) -> dict[str, Any]:
    if parent is None:
        return {"original": True, "note": "An original model: nothing to reproduce."}
    name = (recipe or {}).get("name", "auto")
    return {
        "original": False,
        "made_from": parent,
        "optimize_job": (origin or {}).get("job_id"),
        "optimize_spec": (origin or {}).get("spec"),
        "command": f"optistudio optimize {parent['name']}.onnx --recipe {name} --out variants/",
    }


def _tensorrt_note(inventories: list[tuple[str, dict[str, Any]]]) -> str:
    hosts = [host for host, inv in inventories if offers(inv, backend="tensorrt", device="cuda")]
    if not hosts:
        return TENSORRT_SKIPPED
    return (
        f"Worker {hosts[0]} offers TensorRT, but bundles do not build engines yet; build it there "
        "with `trtexec --onnx=... --saveEngine=model.plan`."
    )
