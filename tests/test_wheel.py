"""The wheel installs one import name, `optistudio`, with every room mapped under it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "__pycache__", "*.egg-info", "build", "dist", ".*_cache", ".hypothesis"
)
"""What a checkout holds besides its sources: left out of the copy the wheel is built from."""


def not_source(folder: str, names: list[str]) -> set[str]:
    """NOT_SOURCE, and the studio's ./data at the top (core/data is a source folder)."""
    top = {"data"} & set(names) if Path(folder) == REPO else set()
    return set(NOT_SOURCE(folder, names)) | top


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """The wheel pip builds from a copy of the sources: setuptools builds in the tree it is
    given, and the checkout's own tree changes while the other pytest-xdist workers import
    from it (a fresh clone's first imports write its bytecode: a CI run's build failed once)."""
    out = tmp_path_factory.mktemp("wheel")
    source = tmp_path_factory.mktemp("source") / "optistudio"
    shutil.copytree(REPO, source, ignore=not_source)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
        cwd=out,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    [built] = out.glob("optistudio-*.whl")
    return zipfile.ZipFile(built)


def test_optistudio_is_the_only_top_level_name(wheel: zipfile.ZipFile) -> None:
    tops = {name.split("/")[0] for name in wheel.namelist()}
    code = {top for top in tops if not top.endswith(".dist-info")}

    assert code == {"optistudio"}
    top_level = [n for n in wheel.namelist() if n.endswith("top_level.txt")]
    if top_level:
        assert wheel.read(top_level[0]).decode().split() == ["optistudio"]


def test_every_room_is_mapped_under_it(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())

    for module in (
        "optistudio/__init__.py",
        "optistudio/core/__init__.py",
        "optistudio/core/errors.py",
        "optistudio/core/backends/base.py",
        "optistudio/db/models.py",
        "optistudio/workers/app.py",
        "optistudio/studio/app.py",
        "optistudio/migrations/env.py",
        "optistudio/migrations/script.py.mako",
        "optistudio/migrations/versions/0001_initial.py",
        "optistudio/cli/__init__.py",
        "optistudio/services/settings.py",
    ):
        assert module in names, module


def test_entry_points_name_modules_inside_the_wheel(wheel: zipfile.ZipFile) -> None:
    [entry_points] = [n for n in wheel.namelist() if n.endswith("entry_points.txt")]
    targets = [
        line.split("=", 1)[1].strip().split(":")[0]
        for line in wheel.read(entry_points).decode().splitlines()
        if "=" in line
    ]
    names = set(wheel.namelist())

    assert targets and all(target.startswith("optistudio") for target in targets)
    for target in targets:
        path = target.replace(".", "/")
        assert f"{path}.py" in names or f"{path}/__init__.py" in names, target
