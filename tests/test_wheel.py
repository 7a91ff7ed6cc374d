"""The wheel installs one import name, `optistudio`, with every room mapped under it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    build = tmp_path_factory.mktemp("build")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO)],
        check=True,
        cwd=build,
        capture_output=True,
    )
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
