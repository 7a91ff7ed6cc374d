"""Fixtures of the browser tests: `studio` (a real `optistudio up` stack) and `page` (Chromium)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser import (
    CHROMIUM,
    CHROMIUM_FLAGS,
    EXPECT_TIMEOUT_MS,
    UI_TIMEOUT_MS,
    Studio,
    require_chromium,
)

from optistudio.cli.launcher import free_port


@pytest.fixture
def studio(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Studio]:
    """Extra environment for `optistudio up` can come as an indirect parameter (a dict)."""
    require_chromium()
    port = free_port()
    env = dict(os.environ, OPTISTUDIO_DATA_DIR=str(tmp_path / "data"), OPTISTUDIO_UI_PORT=str(port))
    env.pop("OPTISTUDIO_DATABASE_URL", None)
    env.update(getattr(request, "param", {}))
    log_path = tmp_path / "up.log"
    log = log_path.open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "optistudio.cli", "up"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    studio = Studio(url, process, port, log_path)
    deadline = time.monotonic() + 240
    while "Optistudio is running at" not in log_path.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"optistudio up did not start:\n{studio.log()}")
        time.sleep(0.3)
    try:
        yield studio
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=40)
        log.close()


@pytest.fixture
def page(studio: Studio) -> Iterator[object]:
    from playwright.sync_api import expect, sync_playwright

    # An assertion's own wait (5 s by default) is shorter than a studio page's first run when
    # two suites' studios share 2 cores (CI runs this suite on two pytest-xdist workers).
    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(UI_TIMEOUT_MS)
        yield page
        browser.close()
