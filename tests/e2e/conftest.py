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

PORT_TAKEN = "is not available"
"""What Streamlit prints when the port it was given was taken between free_port() and its bind
(an outgoing connection's ephemeral port, another suite's stack): the start is tried again."""
STARTS = 3


@pytest.fixture
def studio(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Studio]:
    """Extra environment for `optistudio up` can come as an indirect parameter (a dict)."""
    require_chromium()
    for attempt in range(1, STARTS + 1):
        studio, log = _start(tmp_path, getattr(request, "param", {}))
        if studio is not None:
            break
        text = log.read_text()
        if PORT_TAKEN not in text or attempt == STARTS:
            pytest.fail(f"optistudio up did not start:\n{text}")
    assert studio is not None
    try:
        yield studio
    finally:
        if studio.process.poll() is None:
            studio.process.send_signal(signal.SIGINT)
            studio.process.wait(timeout=40)


def _start(folder: Path, extra_env: dict[str, str]) -> tuple[Studio | None, Path]:
    """`optistudio up` on a free port with its data and log (up.log, anew each start) in
    `folder`: the running studio, or None when it exited (or took over 240 s) before saying it
    runs; the log either way. A start that failed leaves nothing a later one trips on (the
    database is migrated again, which changes nothing)."""
    port = free_port()
    env = dict(os.environ, OPTISTUDIO_DATA_DIR=str(folder / "data"), OPTISTUDIO_UI_PORT=str(port))
    env.pop("OPTISTUDIO_DATABASE_URL", None)
    env.update(extra_env)
    log_path = folder / "up.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "optistudio.cli", "up"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
    studio = Studio(f"http://127.0.0.1:{port}", process, port, log_path)
    deadline = time.monotonic() + 240
    while "Optistudio is running at" not in log_path.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=40)
            return None, log_path
        time.sleep(0.3)
    return studio, log_path


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
