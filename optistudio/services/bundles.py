"""What a bundle holds, gathered from the database for `optistudio.core.report.bundle` (CLI and export job)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from optistudio.core.backends.inventory import offers
from optistudio.core.errors import InvalidSpec
from optistudio.core.model.info import ModelInfo
from optistudio.core.report.bundle import TENSORRT_SKIPPED, BundleSource
from optistudio.core.report.litert import PRECISIONS as LITERT_PRECISIONS
from optistudio.db.models import JobKind
from optistudio.db.queries import get_model, list_workers, newest_succeeded
from optistudio.db.selection import stored_results, variant_origin
from optistudio.db.session import transaction
from optistudio.services.artifact_store import store_for
from optistudio.services.input_profiles import profile_of
from optistudio.services.settings import Settings

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
        profile = profile_of(s, model).model_dump(mode="json")
        verify = newest_succeeded(s, kind=JobKind.batching_verify, model_id=model.id)
        serving = _served(verify.id, verify.spec) if verify is not None else None
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
    )


def _served(job_id: int, spec: dict[str, Any] | None) -> dict[str, Any] | None:
    """The batching settings the model's newest successful Verify served and measured (what
    the bundle's Triton config and pipeline.json take), with that job's id; None without."""
    settings = (spec or {}).get("settings")
    return {**settings, "verify_job": job_id} if settings else None


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
