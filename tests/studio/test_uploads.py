"""Every uploader states the limit the studio enforces (settings.max_upload_mb), not Streamlit's.

Uploads are stored through `optistudio.services.catalog`, which refuses a file past
`max_upload_mb`; an uploader left to Streamlit's own setting would print another limit ("200MB
per file", or whatever the server was started with) beside it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import optistudio.studio

STUDIO = Path(optistudio.studio.__file__).resolve().parent


def uploaders() -> list[tuple[str, int, set[str]]]:
    """(file, line, keyword names) of every st.file_uploader call in the studio."""
    found = []
    for path in sorted(STUDIO.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "file_uploader"
            ):
                found.append((path.name, node.lineno, {k.arg for k in node.keywords if k.arg}))
    return found


def test_every_uploader_shows_the_limit_the_studio_enforces() -> None:
    calls = uploaders()

    assert len(calls) >= 5  # models, optimize, diagnostics, video at least
    assert [
        (name, line) for name, line, keywords in calls if "max_upload_size" not in keywords
    ] == []
