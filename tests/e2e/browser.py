"""Harness for the browser tests: a real `optistudio up` stack and headless Chromium.

Fixtures `studio` and `page` are in conftest.py; test modules import the helpers from here.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = os.environ.get("OPTISTUDIO_SCREENSHOTS")
UI_TIMEOUT_MS = 60_000
EXPECT_TIMEOUT_MS = 20_000
"""How long an assertion without its own timeout waits (Playwright's default: 5 s)."""


@dataclass
class Studio:
    url: str
    process: subprocess.Popen[str]
    port: int
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    @property
    def data_dir(self) -> Path:
        """Its OPTISTUDIO_DATA_DIR (database, models, logs), beside up.log."""
        return self.log_path.parent / "data"


def last_id(studio: Studio, table: str) -> int:
    """The highest id in the studio's `table` ("models", "jobs"), 0 while it is empty: a test on
    a shared studio names its own rows from there (its first model is last_id + 1)."""
    with closing(sqlite3.connect(studio.data_dir / "optistudio.db")) as db:
        return int(db.execute(f"SELECT COALESCE(MAX(id), 0) FROM {table}").fetchone()[0])


def require_chromium() -> None:
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail("Chromium is missing in CI: .ci/run must install Debian's chromium")
        pytest.skip("Debian chromium is not installed (apt-get install chromium)")


def shot(page: object, name: str) -> None:
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        page.wait_for_timeout(2500)  # type: ignore[attr-defined] # let charts and tables paint
        page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"), full_page=True)  # type: ignore[attr-defined]


def upload(page: object, path: Path) -> None:
    page.locator("input[type='file']").first.set_input_files(str(path))  # type: ignore[attr-defined]


QUICK_BENCH = ["--min-seconds", "0.05", "--max-seconds", "1", "--min-runs", "5", "--warmup", "1"]


def bench_save(model: Path, data_dir: Path, *flags: str) -> None:
    """Store a model and a quick benchmark of it through the CLI (`bench --save`), with any
    other `bench` flags (`--backend openvino`)."""
    env = dict(os.environ, OPTISTUDIO_DATA_DIR=str(data_dir))
    env.pop("OPTISTUDIO_DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "optistudio.cli", "bench", str(model), "--save", *QUICK_BENCH]
        + list(flags),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
