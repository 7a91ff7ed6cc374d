"""The house's import directions hold: core is a plain library, migrations stand alone."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

FORBIDDEN = {
    "core": {"streamlit", "celery", "sqlalchemy", "db", "workers", "studio", "optistudio"},
    "db": {"core", "workers", "studio", "optistudio", "streamlit", "celery"},
    "migrations/versions": {"db", "core", "workers", "studio", "optistudio"},
    "workers": {"studio", "streamlit"},
}


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", sorted(FORBIDDEN), ids=str)
def test_package_does_not_import_forbidden_layers(package: str) -> None:
    files = sorted((REPO / package).rglob("*.py"))
    assert files, f"{package} has no modules"

    offenders = {
        str(path.relative_to(REPO)): sorted(imported_roots(path) & FORBIDDEN[package])
        for path in files
    }

    assert {k: v for k, v in offenders.items() if v} == {}


def test_studio_uses_only_the_celery_app_object_of_workers() -> None:
    allowed = {"workers.app"}
    used = set()
    for path in (REPO / "studio").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("workers")
            ):
                used.add(node.module)
    assert used <= allowed
