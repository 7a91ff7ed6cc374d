"""The what-if's band on the Batching page (issue 44, item 1), in real headless Chromium against
a real `optistudio up` stack: the slider's prediction comes with its p99 band and lies inside
it; Verify (a real load run on the real worker, as long as the band's runs) is judged against
that same band, says whether its measured p99 lies inside, above or below it as its own numbers
show, and any note on the model's speed during the run points the way the numbers went. No
figure is asserted: only that what the page says agrees with what it shows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from browser import UI_TIMEOUT_MS, Studio, shot
from seed_models import add_models

from optistudio.core.batching.simulate import VERIFY_SECONDS

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.shared_studio]

NUMBER = r"(\d+(?:\.\d+)?(?:e[+-]\d+)?)"
"""A figure as the page writes it (three significant digits, .3g's e-notation past 999)."""
BAND_LINE = re.compile(
    rf"p99 {NUMBER} ms \(band {NUMBER}-{NUMBER}\), p50 {NUMBER} ms \(band {NUMBER}-{NUMBER}\), "
    rf"throughput {NUMBER} req/s \(band {NUMBER}-{NUMBER}\)\. The band holds \d+% of \d+ "
    rf"simulated {VERIFY_SECONDS:g}-s Verify runs"
)
VERDICT = re.compile(
    rf"Measured p99 {NUMBER} ms lies (inside|above|below) the predicted band {NUMBER}-{NUMBER} "
    rf"ms \(±\d+% of the predicted {NUMBER} ms\)\."
)
BEFORE = re.compile(
    rf"Before it ran, at the offered rate: p99 {NUMBER} ms \(band ({NUMBER}-{NUMBER})\)"
)
SPEED = re.compile(r"The model ran (\d+\.\d\d)x (slower|faster) during this verify run")


def metric(page, label: str) -> float:  # type: ignore[no-untyped-def]
    box = page.locator("[data-testid='stMetric']").filter(has_text=label)
    return float(box.locator("[data-testid='stMetricValue']").inner_text())


def shown_band(page) -> re.Match[str]:  # type: ignore[no-untyped-def]
    """The what-if's band line; its figures each lie inside their band, and its p99 is the
    p99 metric above it (each as rounded)."""
    from playwright.sync_api import expect

    line = page.get_by_text(BAND_LINE)
    expect(line).to_be_visible(timeout=UI_TIMEOUT_MS)
    found = BAND_LINE.search(str(line.inner_text()))
    assert found, line.inner_text()
    p99, p99_low, p99_high, p50, p50_low, p50_high, served, low, high = map(float, found.groups())
    for point, bottom, top in ((p99, p99_low, p99_high), (p50, p50_low, p50_high)):
        assert bottom <= point <= top, found.group(0)
    assert low <= served <= high, found.group(0)
    assert p99 == pytest.approx(metric(page, "p99 latency (ms)"), rel=0.005, abs=0.005)
    return found


def verdict_agrees_with_its_numbers(page) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """The Verify's verdict: where it says the measured p99 lies agrees with the numbers it
    shows (rounding keeps their order), and a success box only for "inside". Returns where it
    lies and the band it names."""
    text = page.get_by_text(VERDICT)
    found = VERDICT.search(str(text.inner_text()))
    assert found, text.inner_text()
    measured, where, low, high = float(found[1]), found[2], float(found[3]), float(found[4])
    if where == "inside":
        assert low <= measured <= high, found.group(0)
    elif where == "above":
        assert measured >= high, found.group(0)
    else:
        assert measured <= low, found.group(0)
    kind = "Success" if where == "inside" else "Warning"
    box = page.locator(f"[data-testid='stAlertContent{kind}']").filter(has_text=found.group(0))
    assert box.count() == 1, f"the verdict is not in a {kind.lower()} box: {found.group(0)}"
    return where, f"{found[3]}-{found[4]}"


def speed_note_points_the_way_it_went(page) -> None:  # type: ignore[no-untyped-def]
    """A note on the model's speed during the run (only where it strayed from the profile)
    blames the speed only for a gap the speed moves that way, and otherwise says it is not."""
    notes = page.locator("[data-testid='stAlert']").filter(has_text=SPEED)
    for index in range(notes.count()):
        text = str(notes.nth(index).inner_text())
        slower = SPEED.search(text)[2] == "slower"  # type: ignore[index]
        figures = re.search(rf"{NUMBER} ms measured, {NUMBER} predicted", text)
        against = re.search(rf"measured p99 \({NUMBER} ms\) lies (above|below) the predicted", text)
        if against:  # the speed points the other way: it is not named the cause
            assert (against[2] == "above") != slower, text
            assert "not from the model's speed" in text, text
        elif figures and figures[1] != figures[2]:  # named (wholly or in part) as the cause
            assert (float(figures[1]) > float(figures[2])) == slower, text


def test_verify_is_judged_against_the_band_the_slider_showed(
    studio: Studio, page, studio_settings, own_model, tiny_model: Path
) -> None:
    from playwright.sync_api import expect

    (model,) = add_models(studio_settings, [own_model(tiny_model)])
    page.goto(f"{studio.url}/batching?model={model}")
    expect(page.get_by_text("No profile of this model yet")).to_be_visible(timeout=UI_TIMEOUT_MS)
    page.get_by_text("Quick profile").click()  # the band's plumbing, not its width
    page.get_by_role("button", name="Profile", exact=True).click()
    expect(page.get_by_role("heading", name="What if")).to_be_visible(timeout=2 * UI_TIMEOUT_MS)
    band = shown_band(page)
    shot(page, "whatif-band")

    page.get_by_role("tab", name="Verify").click()
    expect(page.get_by_label("Seconds")).to_have_value(f"{VERIFY_SECONDS:.2f}")  # the band's runs
    page.get_by_role("button", name="Verify", exact=True).click()
    ran = re.compile(r"Verify job #\d+ · max batch \d+, timeout [\d.]+ ms, 1 instance\(s\)")
    expect(page.get_by_text(ran)).to_be_visible(timeout=3 * UI_TIMEOUT_MS)
    expect(page.get_by_text(VERDICT)).to_be_visible()
    where, judged_band = verdict_agrees_with_its_numbers(page)

    # Judged against the band the slider showed: the verdict's own, or (judged on the run's
    # own send times) the one the caption says it predicted before it ran.
    caption = page.get_by_text(re.compile(r"^Judged against the prediction from the profile"))
    expect(caption).to_be_visible()
    before = BEFORE.search(str(caption.inner_text()))
    slider_band = f"{band[2]}-{band[3]}"
    assert (before[2] if before else judged_band) == slider_band, (caption.inner_text(), band[0])

    speed_note_points_the_way_it_went(page)
    inside = 1 if where == "inside" else 0
    tally = page.get_by_text(
        f"{inside} of 1 Verify runs measured a p99 inside the band predicted before they ran"
    )
    expect(tally).to_be_visible()
    shot(page, "whatif-verified")
    assert "Traceback" not in page.content()
