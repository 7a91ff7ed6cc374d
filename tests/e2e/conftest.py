"""Fixtures of the browser tests: `studio` (a real `optistudio up` stack) and `page` (Chromium).

A stack takes 15-40 s of CPU to start (Redis, a Celery worker importing every backend, Streamlit),
and far longer beside other suites. A test marked `shared_studio` runs on one stack per
pytest(-xdist) worker, shared with the other tests so marked: it stores models of its own
(`own_model`: unique SHA-256s) and counts its model and job ids from the database's state
(`last_id`), so other tests' rows never change what it sees. A test that needs an empty studio
(an empty state, "No jobs yet", every job on the Jobs page) or a studio of its own (an indirect
parameter with other environment, Ctrl-C) is left unmarked and gets a fresh stack.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import onnx
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

SHARED_MARKER = (
    "shared_studio: a browser test that runs on its pytest worker's shared `optistudio up` "
    "stack: it stores models of its own and counts ids from the database (tests/e2e/conftest.py)"
)
PORT_TAKEN = "is not available"
"""What Streamlit prints when the port it was given was taken between free_port() and its bind
(an outgoing connection's ephemeral port, another suite's stack): the start is tried again."""
STARTS = 3
STOP_S = 40
"""How long a studio may take to stop after its Ctrl-C."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", SHARED_MARKER)


@pytest.fixture
def studio(
    tmp_path: Path,
    request: pytest.FixtureRequest,
    stopping_studios: list[Studio],
) -> Iterator[Studio]:
    """The worker's shared stack for a test marked `shared_studio`; otherwise a fresh one, with
    extra environment for `optistudio up` from an indirect parameter (a dict). A fresh stack is
    told to stop (Ctrl-C) at the end, and the next test's studio starts while it does."""
    require_chromium()
    if request.node.get_closest_marker("shared_studio") and not hasattr(request, "param"):
        yield _alive(request.getfixturevalue("shared_studio"))
        return
    try:
        studio = _start_retrying(tmp_path, getattr(request, "param", {}))
    finally:
        _wait_stopped(stopping_studios)
    try:
        yield studio
    finally:
        _stop(studio, stopping_studios)


@pytest.fixture(scope="session")
def shared_studio(
    tmp_path_factory: pytest.TempPathFactory, stopping_studios: list[Studio]
) -> Iterator[Studio]:
    """One `optistudio up` per pytest(-xdist) worker for the tests marked `shared_studio`,
    started by the first of them and stopped at the end of the session."""
    studio = _start_retrying(tmp_path_factory.mktemp("shared-studio"), {})
    try:
        yield studio
    finally:
        _stop(studio, stopping_studios)


@pytest.fixture
def own_model(request: pytest.FixtureRequest) -> Callable[[Path], Path]:
    """Stamps a model file with this test's id (the model's doc_string, which nothing reads):
    the same graph under a SHA-256 of its own, so a shared studio stores it as a new model
    instead of answering "already stored as model #N" for another test's copy."""

    def stamp(path: Path) -> Path:
        model = onnx.load(path)
        model.doc_string = request.node.nodeid
        onnx.save(model, path)
        return path

    return stamp


@pytest.fixture
def studio_settings(studio: Studio, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """Settings on the studio's own data folder (shared or fresh), as `app_settings` gives a
    fresh test's: for storing rows the studio then shows."""
    from optistudio.services.settings import get_settings

    monkeypatch.setenv("OPTISTUDIO_DATA_DIR", str(studio.data_dir))
    monkeypatch.delenv("OPTISTUDIO_DATABASE_URL", raising=False)
    get_settings.cache_clear()
    yield get_settings()
    get_settings.cache_clear()


def _alive(studio: Studio) -> Studio:
    """The shared studio, or a failure with its log when it has exited (every later test on
    it would otherwise fail on a page that does not load)."""
    if studio.process.poll() is not None:
        pytest.fail(f"the shared optistudio up exited ({studio.log_path}):\n{studio.log()}")
    return studio


def _stop(studio: Studio, stopping: list[Studio]) -> None:
    """Ctrl-C to a studio still running; it is waited for later (`_wait_stopped`)."""
    if studio.process.poll() is None:
        studio.process.send_signal(signal.SIGINT)
        stopping.append(studio)


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
def page(chromium: object) -> Iterator[object]:
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
