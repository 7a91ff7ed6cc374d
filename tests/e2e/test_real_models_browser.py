"""Models as users bring them, in headless Chromium: a Paddle-style -1 model and a '?'-dims
text-line model are stored; the card proposes each an input profile and names its guesses; the
user sets the line width on the card; optimization then times every variant at that width and
the page shows each variant's outcome."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from browser import UI_TIMEOUT_MS, Studio, last_id, shot, upload
from optimize_models import text_line_model
from test_optimize_browser import JOB_TIMEOUT_MS, pick_recipes

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.shared_studio]


def test_real_models_get_a_profile_on_the_card_that_optimization_runs_at(  # type: ignore[no-untyped-def]
    studio: Studio, page, own_model, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    paddle, question = last_id(studio, "models") + 1, last_id(studio, "models") + 2
    job = last_id(studio, "jobs") + 1
    page.goto(studio.url)
    upload(page, own_model(text_line_model(tmp_path / "paddle_line.onnx", dim=-1)))
    expect(page.get_by_text(f"Stored as model #{paddle}.")).to_be_visible(timeout=UI_TIMEOUT_MS)
    upload(page, own_model(text_line_model(tmp_path / "question_line.onnx", dim="?")))
    expect(page.get_by_text(f"Stored as model #{question}.")).to_be_visible(timeout=UI_TIMEOUT_MS)

    page.goto(f"{studio.url}/?model={paddle}")
    expect(page.get_by_role("heading", name="Input profile")).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(
        page.get_by_text(re.compile(r"Guessed: dim 3: 320: a text line 32 high"))
    ).to_be_visible()
    expect(page.get_by_role("textbox", name="Shape of x")).to_have_value("1, 3, 32, 320")

    page.goto(f"{studio.url}/?model={question}")
    expect(page.get_by_text("Some sizes were guessed")).to_be_visible(timeout=UI_TIMEOUT_MS)
    page.get_by_role("textbox", name="Shape of x").fill("1, 3, 32, 128")
    page.get_by_role("button", name="Save input profile").click()
    expect(
        page.get_by_text("Saved. Every job on this model now runs at x: [batch, 3, 32, 128].")
    ).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(page.get_by_text("Some sizes were guessed")).to_have_count(0)
    shot(page, "input-profile-saved")

    page.goto(f"{studio.url}/optimize?model={question}")
    expect(page.get_by_role("heading", name="Optimize")).to_be_visible(timeout=UI_TIMEOUT_MS)
    pick_recipes(page, ["Graph optimization", "FP16"])
    page.get_by_role("spinbutton", name="Timing seconds per variant").fill("0.2")
    page.get_by_role("button", name="Optimize", exact=True).click()
    expect(page.get_by_text(re.compile(rf"Optimize job #{job} submitted"))).to_be_visible()

    # At the default width of 16 the pool cannot run; at the card's 128 both variants are made.
    expect(page.get_by_text(re.compile(r"Made 2 variant\(s\)"))).to_be_visible(
        timeout=JOB_TIMEOUT_MS
    )
    expect(page.get_by_text(re.compile(r"Inputs: dims x\.3=128\."))).to_be_visible()
    expect(page.get_by_text("Traceback")).to_have_count(0)
    shot(page, "optimize-at-the-profile")
