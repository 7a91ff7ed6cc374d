"""Accuracy in the task's own terms, in headless Chromium: the user picks the task and sets a
budget in its metrics on the Optimize page, and reads where the variant and the original
disagree (the drill-down)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from browser import UI_TIMEOUT_MS, Studio, last_id, shot, store
from optimize_models import near_tie_classifier
from test_optimize_browser import JOB_TIMEOUT_MS, pick_recipes

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.shared_studio]


def choose(page, box: str, option: str) -> None:  # type: ignore[no-untyped-def]
    """Open a selectbox and pick an option; a click that lands while another popover closes
    (the recipes' list) is tried again."""
    selectbox = page.locator("[data-testid='stSelectbox']").filter(has_text=box)
    wanted = page.get_by_role("option", name=option, exact=True)  # not "Binary classification"
    for _ in range(5):
        selectbox.click()
        try:
            wanted.wait_for(timeout=3000)
            break
        except Exception:  # noqa: BLE001 - playwright's TimeoutError: click again
            page.keyboard.press("Escape")
    wanted.click()


def test_a_task_budget_judges_and_the_drilldown_shows_the_flipped_samples(  # type: ignore[no-untyped-def]
    studio: Studio, page, own_model, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    job = last_id(studio, "jobs") + 1
    model = store(page, studio, own_model(near_tie_classifier(tmp_path / "near_tie.onnx")))

    page.goto(f"{studio.url}/optimize?model={model}")
    expect(page.get_by_role("heading", name="Optimize")).to_be_visible(timeout=UI_TIMEOUT_MS)
    pick_recipes(page, ["INT8 dynamic"])
    choose(page, "Task", "Classification")
    page.get_by_role("textbox", name="Budget in the task's terms").fill("top1_disagreement=0.02")
    page.get_by_role("spinbutton", name="Timing seconds per variant").fill("0.2")
    page.get_by_role("button", name="Optimize", exact=True).click()
    expect(page.get_by_text(re.compile(rf"Optimize job #{job} submitted"))).to_be_visible()

    task = page.get_by_text(re.compile(r"Judged as classification: set by the user"))
    expect(task).to_be_visible(timeout=JOB_TIMEOUT_MS)
    expect(page.get_by_text(re.compile(r"Budget: top1_disagreement=0\.02"))).to_be_visible()
    drill = page.get_by_text("Where INT8 dynamic and the original disagree most")
    drill.click()
    expect(page.get_by_text(re.compile("No optimization run of"))).to_have_count(0)
    shot(page, "task-drilldown")
    expect(page.get_by_text("Traceback")).to_have_count(0)
