"""The Batching page keeps the what-if arrival rate the user set through a Verify run (a real load
run on the real worker), in real headless Chromium against a real `optistudio up` stack."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from browser import UI_TIMEOUT_MS, Studio, bench_save, last_id, shot

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.shared_studio]
RATE = "Arrival rate (req/s)"
STEPS = 3


def url_rate(url: str) -> float | None:
    """The what-if arrival rate a page's URL holds."""
    values = parse_qs(urlparse(url).query).get("rate")
    return float(values[0]) if values else None


def test_verify_keeps_the_arrival_rate_the_user_set(
    studio: Studio, page, own_model, tiny_model: Path
) -> None:
    from playwright.sync_api import expect

    model = last_id(studio, "models") + 1
    bench_save(own_model(tiny_model), studio.data_dir)
    page.goto(f"{studio.url}/batching?model={model}")
    page.get_by_text("Quick profile").click(timeout=2 * UI_TIMEOUT_MS)
    page.get_by_role("button", name="Profile", exact=True).click(timeout=2 * UI_TIMEOUT_MS)
    expect(page.get_by_role("heading", name="What if")).to_be_visible(timeout=2 * UI_TIMEOUT_MS)
    rate = page.get_by_role("slider", name=RATE)
    expect(rate).to_be_visible()
    first = rate.input_value()
    rate.focus()
    for _ in range(STEPS):  # a rate of the user's own, a few steps below the page's choice
        page.keyboard.press("ArrowLeft")
    expect(rate).not_to_have_value(first, timeout=UI_TIMEOUT_MS)
    chosen = rate.input_value()
    page.wait_for_url(lambda url: url_rate(url) == float(chosen))
    shot(page, "batching-rate-chosen")

    page.get_by_role("tab", name="Verify").click()
    page.get_by_label("Seconds").fill("1")  # no Enter: it would submit the form
    page.get_by_role("button", name="Verify", exact=True).click()
    verified = re.compile(
        rf"Verify job #\d+ · max batch \d+.* {re.escape(f'{float(chosen):g}')} req/s"
    )
    expect(page.get_by_text(verified)).to_be_visible(timeout=2 * UI_TIMEOUT_MS)

    expect(rate).to_have_value(chosen)
    assert url_rate(page.url) == float(chosen), page.url
    page.goto(page.url)  # the kept rate is in the URL: a reload shows it again
    expect(page.get_by_role("slider", name=RATE)).to_have_value(chosen, timeout=UI_TIMEOUT_MS)
    shot(page, "batching-rate-after-verify")
    assert "Traceback" not in page.content()
