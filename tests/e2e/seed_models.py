"""Models stored in a browser test's database as `optistudio models add` stores them (intake and
ONNX Runtime's load check, origin 'cli'), for tests whose subject is not the upload."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def add_models(settings: Any, paths: list[Path]) -> list[int]:
    """Store each file under its stem as the model's name; their ids, in order."""
    from optistudio.db.session import make_session_factory
    from optistudio.services.catalog import add_model_file

    factory = make_session_factory(settings.database_url)
    return [
        add_model_file(factory, settings, path, name=path.stem, origin="cli").model_id
        for path in paths
    ]
