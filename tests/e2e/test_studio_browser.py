"""The studio in real headless Chromium, against a real `optistudio up` stack."""

from __future__ import annotations

import re
import signal
import socket
from pathlib import Path

import psutil
import pytest
from browser import UI_TIMEOUT_MS, Studio, shot, upload

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_upload_benchmark_and_see_the_result(studio: Studio, page, tiny_model: Path, tmp_path):
    from playwright.sync_api import expect

    page.goto(studio.url)
    expect(page.get_by_role("heading", name="Models")).to_be_visible(timeout=UI_TIMEOUT_MS)
    page.wait_for_url(re.compile(r"/models(\?|$)"))  # the root opens Models at its own path
    expect(page.get_by_text("No models yet")).to_be_visible()

    upload(page, tiny_model)
    expect(page.get_by_text("Stored as model #1.")).to_be_visible()
    expect(page.get_by_text("Model card · tiny")).to_be_visible()
    expect(page.get_by_text("Parameters")).to_be_visible()

    page.get_by_role("button", name="Add sample").click()  # the default sample: Tiny CNN
    expect(page.get_by_text("Stored as model #2.")).to_be_visible()
    expect(page.get_by_text("Model card · tiny_cnn")).to_be_visible()
    shot(page, "models")

    page.get_by_role("button", name="Benchmark").click()
    expect(page.get_by_text("Benchmark job #1 submitted.")).to_be_visible()

    page.goto(f"{studio.url}/jobs")
    expect(page.get_by_role("heading", name="Jobs")).to_be_visible()
    expect(page.get_by_text("succeeded").first).to_be_visible(timeout=90_000)
    expect(page.get_by_text(re.compile(r"^Measured batch sizes 1, 8\.")).first).to_be_visible()
    shot(page, "jobs")
    page.get_by_role("link", name="See it on the Results page").first.click()
    page.wait_for_url(re.compile(r"/results\?model=2$"))  # in this tab, not a new one
    assert len(page.context.pages) == 1
    expect(page.get_by_role("heading", name="Every measurement")).to_be_visible()

    page.goto(f"{studio.url}/results?model=2")
    expect(page.get_by_role("heading", name="Latency percentiles per batch size")).to_be_visible()
    expect(page.locator(".js-plotly-plot").first).to_be_visible()
    expect(page.get_by_text(re.compile("p50 ± half the p10"))).to_be_visible()
    shot(page, "results")

    page.goto(f"{studio.url}/compare")
    expect(page.get_by_role("heading", name="Compare")).to_be_visible()
    page.get_by_role("button", name="Compare").click()  # A = tiny, B = tiny_cnn by default
    expect(page.get_by_text(re.compile(r"Comparison job #\d+ submitted"))).to_be_visible()
    expect(page.get_by_text(re.compile(r"Latest:.*takes .*x the time of"))).to_be_visible(
        timeout=90_000
    )
    shot(page, "compare")

    page.goto(f"{studio.url}/optimize?model=2")
    expect(page.get_by_role("heading", name="Optimize")).to_be_visible()
    page.get_by_role("button", name="Optimize").click()  # Auto on tiny_cnn, synthetic data
    expect(page.get_by_text(re.compile(r"Optimize job #\d+ submitted"))).to_be_visible()
    expect(page.get_by_text("No data given")).to_be_visible()
    expect(page.get_by_text(re.compile(r"Made \d+ variant"))).to_be_visible(timeout=150_000)
    shot(page, "optimize")

    page.goto(f"{studio.url}/results?model=2")
    shot(page, "results-variants")
    expect(page.get_by_role("heading", name="Optimized variants")).to_be_visible()

    page.goto(f"{studio.url}/models")  # a direct link to Models: once "Page not found"
    expect(page.get_by_role("heading", name="Models")).to_be_visible()
    expect(page.get_by_text("Page not found")).to_have_count(0)
    assert re.search(r"/models(\?|$)", page.url), page.url


def test_bad_files_are_refused_with_a_reason(studio: Studio, page, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    notes = tmp_path / "notes.onnx"
    notes.write_text("these are my notes, not a model")
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    page.goto(studio.url)
    note = "[data-testid='stFileUploaderDropzoneInstructions']"
    page.locator(note).first.wait_for(timeout=UI_TIMEOUT_MS)
    stated = page.evaluate(
        f"""() => [getComputedStyle(document.querySelector("{note} > div"), '::after').content,
                   getComputedStyle(document.querySelector("{note} span")).display]"""
    )
    assert stated == ['"Up to 512 MB per file"', "none"]  # the limit intake enforces, not "1GB"

    upload(page, notes)
    expect(page.get_by_text(re.compile("Model refused: .*not an ONNX", re.I))).to_be_visible()
    upload(page, empty)
    expect(page.get_by_text(re.compile("Model refused: .*empty", re.I))).to_be_visible()

    expect(page.get_by_text("Traceback")).to_have_count(0)
    expect(page.get_by_text("No models yet")).to_be_visible()


def test_ctrl_c_stops_every_process_and_frees_the_port(studio: Studio) -> None:
    children = psutil.Process(studio.process.pid).children(recursive=True)
    assert len(children) >= 3  # redis, worker (+ its pool), streamlit

    studio.process.send_signal(signal.SIGINT)
    assert studio.process.wait(timeout=40) == 0

    gone, alive = psutil.wait_procs(children, timeout=10)
    assert alive == [], f"orphans left: {[p.pid for p in alive]}"
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", studio.port), timeout=1):
        pass


@pytest.mark.shared_studio
def test_hardware_page_lists_the_live_worker_and_what_it_offers(studio: Studio, page) -> None:
    from playwright.sync_api import expect

    page.goto(f"{studio.url}/hardware")

    expect(page.get_by_role("heading", name="Hardware")).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(page.get_by_text("Live workers")).to_be_visible()
    expect(page.get_by_test_id("stMetricValue").first).to_have_text("1")
    shot(page, "hardware")
