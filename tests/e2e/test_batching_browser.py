"""The Batching page in real headless Chromium against a real `optistudio up` stack:
profile a model (a real job on the real worker), move a slider, the predicted numbers change,
verify the setting (a real load run on the worker) beside the prediction, export it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from browser import UI_TIMEOUT_MS, Studio, bench_save, last_id, shot

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.shared_studio]


def metric(page, label: str) -> str:  # type: ignore[no-untyped-def]
    box = page.locator("[data-testid='stMetric']").filter(has_text=label)
    return box.locator("[data-testid='stMetricValue']").inner_text()


def test_profile_then_a_slider_changes_the_prediction(
    studio: Studio, page, own_model, tiny_model: Path
) -> None:
    from playwright.sync_api import expect

    model = last_id(studio, "models") + 1
    bench_save(own_model(tiny_model), studio.data_dir)
    page.goto(f"{studio.url}/batching?model={model}")
    expect(page.get_by_text("No profile of this model yet")).to_be_visible(timeout=UI_TIMEOUT_MS)
    page.get_by_text("Quick profile").click()  # what the page does with it, not its figures
    page.get_by_role("button", name="Profile", exact=True).click()
    expect(page.get_by_role("heading", name="What if")).to_be_visible(timeout=2 * UI_TIMEOUT_MS)
    warned = page.get_by_test_id("stAlert").filter(has_text="A quick profile: its serving probes")
    expect(warned).to_be_visible()  # said beside the sliders, not only in the job's line
    expect(page.locator(".js-plotly-plot").last).to_be_visible(timeout=UI_TIMEOUT_MS)
    served = re.compile(  # the runtime's costs the predictions carry, measured with the profile
        r"Per-batch hand-back under load: \d+\.\d\d ms; served at a light rate, each runner call "
        r"took \d+\.\d\d ms more than profiled( \(\d+\.\d\d ms at \d+ req/s\))? and each answer "
        r"came \d+\.\d\d ms \(median.*with a batching timeout \(\d+ req/s\) each runner call "
        r"took \d+\.\d\d ms more( \(\d+\.\d\d ms at \d+ req/s, batches of [\d.]+\))?"
        r"( \(p99 -?\d+\.\d\d ms over \d+ calls\))? and each answer "
        r"came "
        r"\d+\.\d\d ms \(median\) after its batch"
    )
    expect(page.get_by_text(served)).to_be_visible()
    band = re.compile(r"p99 [\d.]+ ms \(band [\d.]+-[\d.]+\)")  # the prediction as a band
    expect(page.get_by_text(band)).to_be_visible()
    measured = re.compile(r"Predictions rest on the profile from job #\d+, as measured")
    expect(page.get_by_text(measured)).to_be_visible()
    before = {label: metric(page, label) for label in ("Mean batch size", "p99 latency (ms)")}
    shot(page, "batching-before")

    thumb = page.get_by_role("slider").first  # Max batch size
    thumb.focus()
    for _ in range(7):
        page.keyboard.press("ArrowLeft")  # down to max batch 1: no batching at all
    expect(thumb).to_have_value("1", timeout=UI_TIMEOUT_MS)
    batch = page.locator("[data-testid='stMetric']").filter(has_text="Mean batch size")
    expect(batch.locator("[data-testid='stMetricValue']")).to_have_text(
        "1.00", timeout=UI_TIMEOUT_MS
    )
    after = {label: metric(page, label) for label in before}
    assert after != before, (before, after)
    page.wait_for_url(re.compile(r"max_batch_size=1(&|$)"))  # the what-if lives in the URL
    page.goto(page.url)
    expect(page.get_by_role("slider").first).to_have_value("1", timeout=UI_TIMEOUT_MS)
    shot(page, "batching-after")

    page.get_by_role("tab", name="Verify").click()
    seconds = page.get_by_label("Seconds")
    seconds.fill("1")  # no Enter: it would submit the form, and the click a second Verify
    page.get_by_role("button", name="Verify", exact=True).click()
    # The convergence chart's title also reads "predicted vs measured": wait for this run's own.
    verify_text = re.compile(r"Verify job #\d+ · max batch 1")
    expect(page.get_by_text(verify_text)).to_be_visible(timeout=2 * UI_TIMEOUT_MS)
    expect(page.get_by_text("Predicted vs measured").first).to_be_visible()
    expect(page.get_by_text("Measured p99 in the run's first half")).to_be_visible()
    verdict = re.compile(r"Measured p99 [\d.]+ ms lies (inside|above|below) the predicted band")
    expect(page.get_by_text(verdict)).to_be_visible()
    expect(page.get_by_text(re.compile(r"Arrivals realised: [\d.]+ req/s of the"))).to_be_visible()
    # The Verify job stored the refit, or, where this machine could not keep up with the rate
    # (a saturated run), said why it kept the profile as it was.
    refitted = re.compile(
        r"Predictions rest on the profile from job #\d+, (recalibrated by Verify|as measured\. "
        r"The newest Verify \(job #\d+\) did not move it: Not recalibrated: this run was "
        r"saturated)"
    )
    expect(page.get_by_text(refitted)).to_be_visible()
    expect(page.get_by_text("Convergence: predicted vs measured p99")).to_be_visible()
    shot(page, "batching-verify")

    page.get_by_role("tab", name="Find best settings").click()
    margin = page.get_by_role("spinbutton", name="Speed margin (%)")
    expect(margin).to_have_value("10", timeout=UI_TIMEOUT_MS)
    page.get_by_role("button", name="Find best settings").click()
    reason = page.get_by_text(re.compile(r"with the model 10% slower")).first
    expect(reason).to_be_visible(timeout=2 * UI_TIMEOUT_MS)  # the pick keeps the speed margin
    expect(page.get_by_role("button", name="Apply to the sliders")).to_be_visible()
    shot(page, "batching-best")

    page.get_by_role("tab", name="Export").click()
    download = page.get_by_role("button", name="Download config.pbtxt")
    expect(download).to_be_visible(timeout=UI_TIMEOUT_MS)
    assert "Traceback" not in page.content()
