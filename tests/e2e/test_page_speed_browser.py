"""How long each page takes to render its first screen with 1,000 stored results, in real
headless Chromium against a real `optistudio up` stack.

Reported, never asserted: the figures depend on the machine and on what else runs on it. A
page's first screen is rendered when its title is shown and its script's first run has ended
(Streamlit's `stApp` says `notRunning`). Each page is opened twice: cold (its reads not yet
cached in this studio process) and warm. The figures are printed and written to
page_speed.json in the test's folder, with the load average they were taken under.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from browser import UI_TIMEOUT_MS, Studio
from seed import store_results
from widgets import share_link

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
MODELS = 5
JOBS_PER_MODEL = 50  # four results each: 1,000 in all
COMPARED = 10
DONE = "[data-testid='stApp'][data-test-script-state='notRunning']"


def first_screen_s(page, url: str, title: str | re.Pattern[str]) -> float:  # type: ignore[no-untyped-def]
    """Seconds from asking for `url` to its title shown and its first script run ended."""
    from playwright.sync_api import expect

    start = time.perf_counter()
    page.goto(url)
    heading = page.get_by_role("heading", name=title, exact=isinstance(title, str)).first
    expect(heading).to_be_visible(timeout=UI_TIMEOUT_MS)
    page.wait_for_selector(DONE, timeout=UI_TIMEOUT_MS)
    return time.perf_counter() - start


def compared_keys(settings: object, count: int) -> list[str]:
    """The URL keys (`job.backend.batch.threads`) of the newest `count` stored results."""
    from optistudio.db.selection import result_index
    from optistudio.db.session import make_session_factory, transaction

    with transaction(make_session_factory(settings.database_url)) as s:  # type: ignore[attr-defined]
        rows = result_index(s)[:count]
    return [f"{r['job_id']}.{r['backend']}.{r['batch_size']}.{r['threads']}" for r in rows]


def test_every_page_renders_its_first_screen_with_1000_results(  # type: ignore[no-untyped-def]
    studio: Studio, page, app_settings, make_model, tmp_path: Path, capsys
) -> None:
    models = [make_model(f"m{i}.onnx", features=16 * (i + 1)) for i in range(MODELS)]
    started = time.perf_counter()
    stored = store_results(app_settings, models, jobs_per_model=JOBS_PER_MODEL)
    seeded_s = time.perf_counter() - started
    assert stored == MODELS * JOBS_PER_MODEL * 4

    compare_url = (
        f"{studio.url}/compare?results={'%2C'.join(compared_keys(app_settings, COMPARED))}"
    )
    pages = {
        "models": (f"{studio.url}/models", "Models"),
        "optimize": (f"{studio.url}/optimize?model=1", "Optimize"),
        "jobs": (f"{studio.url}/jobs", "Jobs"),
        "results (all models)": (f"{studio.url}/results", "Results"),
        "results (one model)": (f"{studio.url}/results?model=1", "Results"),
        "compare": (f"{studio.url}/compare", "Compare"),
        f"compare from its URL ({COMPARED} results)": (compare_url, "Compare"),
        "diagnostics": (f"{studio.url}/diagnostics?model=1", "Diagnostics"),
        "batching (no profile)": (f"{studio.url}/batching?model=1", "Batching"),
        "video": (f"{studio.url}/video?model=1", "Video"),
        "hardware": (f"{studio.url}/hardware", "Hardware"),
    }
    figures: dict[str, dict[str, float]] = {}
    for visit in ("cold", "warm"):
        for name, (url, title) in pages.items():
            figures.setdefault(name, {})[f"{visit}_s"] = round(first_screen_s(page, url, title), 2)
    page.goto(compare_url)
    page.wait_for_selector(".js-plotly-plot", timeout=UI_TIMEOUT_MS)
    link = share_link(page)
    shared = re.compile(rf"{COMPARED} results: ")
    for visit in ("cold", "warm"):
        figures.setdefault("share page", {})[f"{visit}_s"] = round(
            first_screen_s(page, link, shared), 2
        )

    report = {
        "stored_results": stored,
        "seeded_in_s": round(seeded_s, 1),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "cpus": len(os.sched_getaffinity(0)),
        "first_screen": figures,
    }
    (tmp_path / "page_speed.json").write_text(json.dumps(report, indent=2))
    with capsys.disabled():  # the figures are the point: shown without -s
        print(f"\npage speed ({tmp_path / 'page_speed.json'}):\n{json.dumps(report, indent=2)}")
    assert set(figures) == {*pages, "share page"}
