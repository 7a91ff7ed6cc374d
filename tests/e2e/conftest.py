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
STOP_S = 40
"""How long a studio may take to stop after its Ctrl-C."""


@pytest.fixture
def studio(
    tmp_path: Path,
    request: pytest.FixtureRequest,
    stopping_studios: list[Studio],
) -> Iterator[Studio]:
    """Extra environment for `optistudio up` can come as an indirect parameter (a dict). At
    the end it is told to stop (Ctrl-C), and the next test's studio starts while it does."""
    require_chromium()
    try:
        studio = _start_retrying(tmp_path, getattr(request, "param", {}))
    finally:
        _wait_stopped(stopping_studios)
    try:
        yield studio
    finally:
        if studio.process.poll() is None:
            studio.process.send_signal(signal.SIGINT)
            stopping_studios.append(studio)


@pytest.fixture(scope="session")
def stopping_studios() -> Iterator[list[Studio]]:
    """The studios told to stop and not yet waited for: the last test's, until the next test's
    studio is up (its 7-10 s of stopping overlap that start), and at the end of the session."""
    stopping: list[Studio] = []
    yield stopping
    _wait_stopped(stopping)


def _wait_stopped(stopping: list[Studio]) -> None:
    """Each studio in `stopping` has exited within STOP_S of its Ctrl-C, or the test fails
    saying which did not (after killing it)."""
    while stopping:
        studio = stopping.pop()
        try:
            studio.process.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            studio.process.kill()
            studio.process.wait(timeout=STOP_S)
            pytest.fail(
                f"optistudio up ({studio.log_path}) did not stop within {STOP_S} s of Ctrl-C"
            )


def _start_retrying(folder: Path, extra_env: dict[str, str]) -> Studio:
    """`_start`, again on another port when the one it was given was taken."""
    for attempt in range(1, STARTS + 1):
        studio, log = _start(folder, extra_env)
        if studio is not None:
            return studio
        text = log.read_text()
        if PORT_TAKEN not in text or attempt == STARTS:
            break
    pytest.fail(f"optistudio up did not start:\n{text}")


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


@pytest.fixture(scope="session")
def chromium() -> Iterator[object]:
    """One Playwright driver and headless Chromium per pytest(-xdist) worker, shared by its
    browser tests: each test gets a fresh context (no cookies, storage or pages of another).
    Starting the driver and Chromium took 13-16 s of each test beside a loaded machine (load
    12-20: most of it the driver, a Node.js process); a new context takes 1-2 s."""
    from playwright.sync_api import sync_playwright

    require_chromium()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(studio: Studio, chromium: object) -> Iterator[object]:
    from playwright.sync_api import expect

    # An assertion's own wait (5 s by default) is shorter than a studio page's first run when
    # two suites' studios share 2 cores (CI runs this suite on two pytest-xdist workers).
    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})  # type: ignore[attr-defined]
    try:
        page = context.new_page()
        page.set_default_timeout(UI_TIMEOUT_MS)
        yield page
    finally:
        context.close()
