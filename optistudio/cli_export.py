"""`optistudio export MODEL_ID --out bundle.zip`: a deployable bundle of a stored model or variant.

The id is a model id as `optimize --save` prints it for each variant (`model_id`) and as
`bench --save` prints it for the model it stored.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import InvalidSpec, ModelRejected
from core.export import TENSORRT_SKIPPED, BundleSource, write_bundle
from core.inventory import offers
from core.model_info import ModelInfo

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

HELP_IDS = (
    "Model ids are printed by `optistudio optimize --save` (each variant's model_id) and "
    "`optistudio bench --save`; the studio's Models page lists them too."
)


def add_export_parser(commands: Any) -> None:
    export = commands.add_parser("export", help="write a deployable zip bundle of a stored model")
    export.add_argument("model_id", type=int, metavar="VARIANT_ID", help="stored model id")
    export.add_argument("--out", type=Path, required=True, help="the .zip file to write")
    export.add_argument("--json", action="store_true", help="print one JSON object")


def command_export(args: argparse.Namespace) -> int:
    from db.session import make_session_factory
    from optistudio.migrate import upgrade
    from optistudio.settings import get_settings

    settings = get_settings()
    upgrade(settings.database_url, lock_dir=settings.data_dir)
    source = bundle_source(make_session_factory(settings.database_url), args.model_id)
    report = write_bundle(source, args.out, progress=None if args.json else _progress)
    payload = {
        "bundle": str(report.path),
        "files": report.files,
        "skipped": report.skipped,
        "size_bytes": report.path.stat().st_size,
    }
    if args.json:
        print(json.dumps(payload, indent=2))
    else:
        print(f"wrote {report.path} ({len(report.files)} files, {payload['size_bytes']:,} bytes)")
        for part, reason in report.skipped.items():
            print(f"  not included, {part}: {reason}")
    return 0


def _progress(fraction: float, message: str) -> None:
    print(f"[{fraction:4.0%}] {message}", file=sys.stderr)


def bundle_source(factory: sessionmaker[Session], model_id: int) -> BundleSource:
    """Everything the database knows about the model, gathered for `core.export`."""
    from db.queries import get_model, list_workers
    from db.selection import stored_results, variant_origin
    from db.session import transaction

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
        path, info, name = Path(model.path), ModelInfo.model_validate(model.info), model.name
        precision, recipe = model.precision, model.recipe
        parent_card = (
            {"id": parent.id, "name": parent.name, "sha256": parent.sha256} if parent else None
        )
    if not path.exists():
        raise ModelRejected(f"The stored file of model #{model_id} is missing ({path}).")
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
    )


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
