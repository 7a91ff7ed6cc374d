"""The Optimize page in headless Chromium: one recipe fails, the job still succeeds, and the page
shows each variant's outcome, the failed one with its reason and what to try."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from browser import UI_TIMEOUT_MS, Studio, last_id, shot, store
from optimize_models import det_model

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.shared_studio]
JOB_TIMEOUT_MS = 150_000


def pick_recipes(page, labels: list[str]) -> None:  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect

    recipes = page.locator("[data-testid='stMultiSelect']").first
    expect(recipes).to_be_visible(timeout=JOB_TIMEOUT_MS)  # the form renders after the model card
    recipes.click()
    page.keyboard.press("Backspace")  # takes Auto, the default, off
    for label in labels:
        page.keyboard.type(label)  # the list is long: filter it to the one option
        page.get_by_role("option", name=label, exact=True).click()
    page.keyboard.press("Escape")


def test_a_failed_recipe_is_shown_with_its_reason_beside_the_made_variant(  # type: ignore[no-untyped-def]
    studio: Studio, page, own_model, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    job = last_id(studio, "jobs") + 1
    # ONNX Runtime runs Det, OpenVINO cannot
    model = store(page, studio, own_model(det_model(tmp_path / "det.onnx")))

    page.goto(f"{studio.url}/optimize?model={model}")
    expect(page.get_by_role("heading", name="Optimize")).to_be_visible(timeout=UI_TIMEOUT_MS)
    pick_recipes(page, ["Graph optimization", "INT8 NNCF (for OpenVINO)"])
    page.get_by_role("spinbutton", name="Timing seconds per variant").fill("0.2")
    page.get_by_role("button", name="Optimize", exact=True).click()
    expect(page.get_by_text(re.compile(rf"Optimize job #{job} submitted"))).to_be_visible()

    # OpenVINO has no Det: its variant is not applicable there (a sentence), not a failure
    made = page.get_by_text(re.compile(r"Made 1 variant\(s\), 1 not applicable\."))
    expect(made).to_be_visible(timeout=JOB_TIMEOUT_MS)
    failure = page.get_by_text(
        re.compile(
            r"INT8 NNCF \(for OpenVINO\)( on openvino)?: not applicable on openvino: OpenVINO could"
        )
    )
    expect(failure).to_be_visible()
    expect(page.get_by_text(re.compile("No optimization run of"))).to_have_count(0)
    failure.scroll_into_view_if_needed()
    shot(page, "optimize-failed-variant")
    expect(page.get_by_text("Traceback")).to_have_count(0)


def test_a_run_that_made_no_variant_shows_an_empty_state_not_empty_axes(  # type: ignore[no-untyped-def]
    studio: Studio, page, own_model, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    model = store(page, studio, own_model(det_model(tmp_path / "det.onnx")))  # OpenVINO: no Det

    page.goto(f"{studio.url}/optimize?model={model}")
    expect(page.get_by_role("heading", name="Optimize")).to_be_visible(timeout=UI_TIMEOUT_MS)
    pick_recipes(page, ["INT8 NNCF (for OpenVINO)"])
    page.get_by_role("spinbutton", name="Timing seconds per variant").fill("0.2")
    page.get_by_role("button", name="Optimize", exact=True).click()

    headline = page.get_by_text(re.compile(r"No variant could be made: 1 not applicable"))
    expect(headline.first).to_be_visible(timeout=JOB_TIMEOUT_MS)
    empty = page.get_by_text(re.compile("No variant was made and timed, so there is no speedup"))
    expect(empty).to_be_visible()
    expect(page.locator(".js-plotly-plot")).to_have_count(0)  # no chart with empty axes
    empty.scroll_into_view_if_needed()
    shot(page, "optimize-no-variant")
    expect(page.get_by_text("Traceback")).to_have_count(0)
