"""The Video page in headless Chromium: a tiny CNN uploaded on the Models page, two real-time
streams of the generated clip played as a job on the real worker, and the page shows each
stream's row, the chart and the speedup over per-frame inference; its link opens the run on the
Compare page as a stored result."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from browser import UI_TIMEOUT_MS, Studio, last_id, shot, store
from diagnostic_models import build_cnn

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.shared_studio]
JOB_TIMEOUT_MS = 150_000


def test_two_streams_play_as_a_job_and_each_has_its_row(  # type: ignore[no-untyped-def]
    studio: Studio, page, own_model, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    job = last_id(studio, "jobs") + 1
    model = store(page, studio, own_model(build_cnn(tmp_path / "cnn.onnx")))

    page.goto(f"{studio.url}/video?model={model}")
    expect(page.get_by_role("heading", name="Video")).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(page.get_by_text(re.compile("No video run of this model yet"))).to_be_visible(
        timeout=UI_TIMEOUT_MS
    )
    expect(page.get_by_role("slider", name="Streams")).to_have_value("2", timeout=UI_TIMEOUT_MS)
    page.get_by_role("spinbutton", name="Seconds").fill("2")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.get_by_text(re.compile(rf"Video job #{job} submitted"))).to_be_visible(
        timeout=UI_TIMEOUT_MS
    )

    expect(page.get_by_text(re.compile(r"Batching gives \d+\.\d\dx"))).to_be_visible(
        timeout=JOB_TIMEOUT_MS
    )
    table = page.locator("[data-testid='stDataFrame']").first
    expect(table).to_contain_text("generated.mp4", timeout=UI_TIMEOUT_MS)  # the grid fills late
    expect(table).to_contain_text("p99 (ms)")
    chart = page.locator(".js-plotly-plot").first
    expect(chart).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(chart).to_contain_text("latency (ms)")
    expect(page.get_by_text("h264 (software)", exact=True)).to_be_visible(timeout=UI_TIMEOUT_MS)
    chart.scroll_into_view_if_needed()
    shot(page, "video-two-streams")
    expect(page.get_by_text("Traceback")).to_have_count(0)

    page.get_by_role("link", name="Compare this run with other results").click()
    expect(page.get_by_role("heading", name="Compare")).to_be_visible(timeout=UI_TIMEOUT_MS)
    results = page.locator("[data-testid='stDataFrame']").first
    expect(results).to_contain_text("video ×2", timeout=UI_TIMEOUT_MS)
    expect(page.get_by_text(re.compile(r"Video runs \(video ×N\)"))).to_be_visible(
        timeout=UI_TIMEOUT_MS
    )
    expect(page.get_by_text(re.compile(r"video, max batch 8")).first).to_be_attached()
    shot(page, "video-in-compare")
    expect(page.get_by_text("Traceback")).to_have_count(0)
