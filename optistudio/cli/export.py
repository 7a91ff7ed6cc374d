"""`optistudio export MODEL_ID --out bundle.zip`: a deployable bundle of a stored model or variant.

The id is a model id as `optimize --save` prints it for each variant (`model_id`) and as
`bench --save` prints it for the model it stored.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from optistudio.cli.output import print_json
from optistudio.core.report.bundle import write_bundle


def add_export_parser(commands: Any) -> None:
    export = commands.add_parser("export", help="write a deployable zip bundle of a stored model")
    export.add_argument("model_id", type=int, metavar="VARIANT_ID", help="stored model id")
    export.add_argument("--out", type=Path, required=True, help="the .zip file to write")
    export.add_argument("--json", action="store_true", help="print one JSON object")


def command_export(args: argparse.Namespace) -> int:
    from optistudio.db.session import make_session_factory
    from optistudio.services.bundles import bundle_source
    from optistudio.services.migrate import upgrade
    from optistudio.services.settings import get_settings

    settings = get_settings()
    upgrade(settings.database_url, lock_dir=settings.data_dir)
    factory = make_session_factory(settings.database_url)
    source = bundle_source(factory, settings, args.model_id)
    report = write_bundle(source, args.out, progress=None if args.json else _progress)
    payload = {
        "bundle": str(report.path),
        "files": report.files,
        "skipped": report.skipped,
        "size_bytes": report.path.stat().st_size,
    }
    if args.json:
        print_json(payload)
    else:
        print(f"wrote {report.path} ({len(report.files)} files, {payload['size_bytes']:,} bytes)")
        for part, reason in report.skipped.items():
            print(f"  not included, {part}: {reason}")
    return 0


def _progress(fraction: float, message: str) -> None:
    print(f"[{fraction:4.0%}] {message}", file=sys.stderr)
