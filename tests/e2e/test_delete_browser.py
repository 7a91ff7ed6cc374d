"""Deleting in real headless Chromium against a real `optistudio up` stack: a model from the
Models page (after a confirmation that says what it frees), a job from the Jobs page, and the
share link of a deleted result saying so."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from browser import UI_TIMEOUT_MS, Studio, bench_save, shot
from widgets import pick, share_link

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def stored_models(data: Path) -> list[Path]:
    """The content-addressed model folders in the artifact store."""
    return [p for p in (data / "artifacts" / "models").glob("*/*") if p.is_dir()]


def test_delete_a_model_and_a_job_and_the_share_link_says_so(
    studio: Studio, page, tiny_model: Path, make_model, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    data = tmp_path / "data"
    bench_save(tiny_model, data)  # model #1, its result job #1
    bench_save(make_model("wide.onnx", features=64), data)  # model #2, job #2
    page.goto(f"{studio.url}/compare")
    heading = page.get_by_role("heading", name="Stored results side by side")
    expect(heading).to_be_visible(timeout=UI_TIMEOUT_MS)  # the studio's first page: imports
    pick(page, "#1 tiny")
    pick(page, "#2 wide")
    expect(page.locator(".js-plotly-plot")).to_have_count(3, timeout=UI_TIMEOUT_MS)
    link = share_link(page)

    page.goto(f"{studio.url}/models?model=1")
    expect(page.get_by_text(re.compile(r"^On disk: "))).to_be_visible()
    page.get_by_role("button", name="Delete model…").click()
    expect(
        page.get_by_text(re.compile(r"^Deletes model #1 tiny: 1 result, 1 job, "))
    ).to_be_visible()
    shot(page, "delete-model-confirm")
    page.get_by_role("button", name="Delete for good").click()
    expect(page.get_by_text(re.compile(r"^Deleted model #1 tiny: freed 1 result"))).to_be_visible()
    expect(page.get_by_text("Model card · wide")).to_be_visible()  # the other model remains
    assert len(stored_models(data)) == 1

    page.goto(link)
    expect(page.get_by_text(re.compile("1 of these 2 results were deleted after"))).to_be_visible()
    expect(page.locator(".js-plotly-plot")).to_have_count(3, timeout=UI_TIMEOUT_MS)
    shot(page, "share-deleted")

    page.goto(f"{studio.url}/jobs")
    expect(page.get_by_role("heading", name="Jobs")).to_be_visible()
    page.get_by_role("button", name="Delete…").click()  # the one job left: #2
    expect(page.get_by_text(re.compile(r"^Deletes job #2: 1 result, 1 job"))).to_be_visible()
    page.get_by_role("button", name="Delete for good").click()
    expect(page.get_by_text(re.compile(r"^Deleted job #2: freed 1 result"))).to_be_visible()
    expect(page.get_by_text("No jobs yet")).to_be_visible()
