"""Compare, share and download in real headless Chromium against a real `optistudio up` stack."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest
from browser import UI_TIMEOUT_MS, Studio, bench_save, shot
from widgets import download

from optistudio.core.report.bundle import verify_bundle

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def pick(page, label: str) -> None:
    page.locator("[data-testid='stMultiSelect']").first.click()
    page.get_by_role("option", name=re.compile(label)).click()
    page.keyboard.press("Escape")


def test_select_share_open_elsewhere_download_revoke_and_export(
    studio: Studio, page, tiny_model: Path, make_model, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    bench_save(tiny_model, tmp_path / "data")
    bench_save(make_model("wide.onnx", features=64), tmp_path / "data")

    page.goto(f"{studio.url}/compare")
    heading = page.get_by_role("heading", name="Stored results side by side")
    expect(heading).to_be_visible(timeout=UI_TIMEOUT_MS)  # the studio's first page: imports
    pick(page, r"#1 tiny .*batch 1 ")
    pick(page, r"#2 wide .*batch 1 ")
    expect(page.get_by_role("heading", name="Error vs p50 latency")).to_be_visible()
    expect(page.locator(".js-plotly-plot")).to_have_count(3, timeout=UI_TIMEOUT_MS)
    page.locator("[data-testid='stSelectbox']").filter(has_text="Chart: latency axis").click()
    page.get_by_role("option", name="p90 latency (ms) ↓").click()  # the Pareto x axis
    expect(page.get_by_role("heading", name="Error vs p90 latency")).to_be_visible()
    page.wait_for_url(re.compile(r"results=1\.onnxruntime\.\d+\.\d+%2C2\.onnxruntime.*latency=p90"))
    selected_url = page.url
    shot(page, "compare-side-by-side")

    page.goto(selected_url)  # the URL alone brings the same view back
    expect(page.locator(".js-plotly-plot")).to_have_count(3, timeout=UI_TIMEOUT_MS)
    page.get_by_role("button", name="Share", exact=True).click()
    link = page.locator("code").filter(has_text="share=").inner_text().strip()
    assert re.search(r"/\?share=[A-Za-z0-9_-]{43}$", link), link

    other = page.context.browser.new_context(accept_downloads=True)  # a colleague's browser
    shared = other.new_page()
    shared.set_default_timeout(UI_TIMEOUT_MS)
    shared.goto(link)
    expect(shared.get_by_role("heading", name="2 results: tiny, wide")).to_be_visible()
    expect(shared.get_by_role("heading", name="Error vs p90 latency")).to_be_visible()
    expect(shared.locator(".js-plotly-plot")).to_have_count(3, timeout=UI_TIMEOUT_MS)
    expect(shared.get_by_text("Read-only snapshot")).to_be_visible()
    expect(shared.locator("[data-testid='stSidebarNav']")).to_have_count(0)
    expect(shared.get_by_role("button", name="Share", exact=True)).to_have_count(0)
    text = download(shared, "Download report (HTML)", tmp_path).read_text()
    assert "2 results: tiny, wide" in text and "plotly.js v" in text
    assert "Error vs p90 latency (Pareto frontier)" in text  # the axes the sender chose
    assert not re.search(r"<script[^>]+src=", text)
    shot(shared, "shared")

    page.get_by_text("Your share links").click()
    page.get_by_role("button", name="Revoke").click()
    expect(page.get_by_text("Share link revoked")).to_be_visible()
    shared.goto(link)
    expect(shared.get_by_role("heading", name="Not found")).to_be_visible()
    expect(shared.locator(".js-plotly-plot")).to_have_count(0)
    other.close()

    page.get_by_role("button", name="Build bundle").click()  # the newest model: wide
    expect(page.get_by_text(re.compile(r"Export job #\d+ submitted"))).to_be_visible()
    button = page.get_by_role("button", name=re.compile(r"Download bundle #\d+"))
    expect(button).to_be_visible(timeout=90_000)
    bundle = download(page, re.compile(r"Download bundle #\d+"), tmp_path)
    assert verify_bundle(bundle) == []
    with zipfile.ZipFile(bundle) as z:
        assert "triton/wide/config.pbtxt" in z.namelist()
