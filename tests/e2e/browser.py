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


MODEL_UPLOADER = "Upload an ONNX model"
"""The Models page's uploader, by its label: its card has uploaders of its own (arrays)."""
GIVE_ATTEMPTS = 3


def upload(page: object, path: Path) -> None:
    """Give `path` to the Models page's model uploader once the page has settled."""
    idle(page)
    uploader = page.get_by_test_id("stFileUploader").filter(has_text=MODEL_UPLOADER)  # type: ignore[attr-defined]
    give(uploader, path)


def store(page: object, studio: Studio, path: Path) -> int:
    """Upload `path` on the studio's Models page as a user does; its new model's id, once the
    page says it is stored (a shared studio's next id: `last_id`)."""
    from playwright.sync_api import expect

    model = last_id(studio, "models") + 1
    page.goto(studio.url)  # type: ignore[attr-defined]
    upload(page, path)
    stored = page.get_by_text(f"Stored as model #{model}.")  # type: ignore[attr-defined]
    expect(stored).to_be_visible(timeout=UI_TIMEOUT_MS)
    return model


def give(uploader: object, path: Path) -> None:
    """Set `path` on the file uploader `uploader` until it shows the file, taken: on a loaded
    machine a file set while the page still settles is now and then dropped, or held against
    another uploader's types ("application/zip files are not allowed"; a CI run's Models page,
    opened on a stored model, once refused an .onnx file so: " files are not allowed")."""
    from playwright.sync_api import expect

    for attempt in range(GIVE_ATTEMPTS):
        uploader.locator("input[type='file']").set_input_files(str(path))  # type: ignore[attr-defined]
        try:
            expect(uploader.get_by_text(path.name)).to_be_visible(timeout=15_000)  # type: ignore[attr-defined]
            expect(uploader.get_by_text("not allowed")).to_have_count(0)  # type: ignore[attr-defined]
            return
        except AssertionError:
            if attempt == GIVE_ATTEMPTS - 1:
                raise


def idle(page: object) -> None:
    """Wait until the page's script run is over: a file given or a download button clicked
    while the page still reruns may land on what the rerun replaces."""
    from playwright.sync_api import expect

    app = page.get_by_test_id("stApp")  # type: ignore[attr-defined]
    expect(app).to_have_attribute("data-test-script-state", "notRunning", timeout=UI_TIMEOUT_MS)


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
