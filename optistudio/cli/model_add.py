"""`optistudio models add PATH`: store a local model (an .onnx file or a model's folder) in the
catalogue the studio reads, checked as an upload is, of any size.

The browser's upload limit (OPTISTUDIO_MAX_UPLOAD_MB) is not applied: the file is already on
this machine, and the machine's own limits hold (declared sizes, node count, the load check's
memory). The studio's "Add from shared storage" does the same for paths under its model roots.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from optistudio.cli.output import print_json


def add_model_add_parser(actions: Any) -> None:
    add = actions.add_parser(
        "add", help="store a local .onnx file or model folder (no upload limit) in the catalogue"
    )
    add.add_argument("path", type=Path, metavar="PATH", help=".onnx file or a model's folder")
    add.add_argument("--name", default=None, help="name in the studio (default: from PATH)")
    add.add_argument(  # SUPPRESS: `models --json add m.onnx` keeps the parent's --json
        "--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON object"
    )


def command_model_add(args: argparse.Namespace) -> int:
    from optistudio.core.llm.folder import decoder_path
    from optistudio.db.session import make_session_factory
    from optistudio.services.catalog import add_model_file
    from optistudio.services.migrate import upgrade
    from optistudio.services.settings import get_settings

    settings = get_settings()
    graph = decoder_path(args.path)
    upgrade(settings.database_url, lock_dir=settings.data_dir)
    factory = make_session_factory(settings.database_url)
    name = args.name or (args.path.name if args.path.is_dir() else graph.stem)
    entry = add_model_file(factory, settings, graph, name=name, origin="cli")
    said = "stored" if entry.created else "already stored"
    payload = {
        "model_id": entry.model_id,
        "created": entry.created,
        "name": entry.name,
        "sha256": entry.info.sha256,
        "size_bytes": entry.info.size_bytes,
        "sentence": f"#{entry.model_id} {entry.name}: {said} ({_megabytes(entry.info.size_bytes)}).",
    }
    if getattr(args, "json", False):
        print_json(payload)
    else:
        print(payload["sentence"])
    return 0


def _megabytes(size: int) -> str:
    return f"{size / 2**20:,.1f} MB"
