"""The Diagnostics page in headless Chromium: profile with an INT8 variant, explainer, soak."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from browser import UI_TIMEOUT_MS, Studio, last_id, shot, upload
from diagnostic_models import build_cnn, quantize_cnn

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.shared_studio]
JOB_TIMEOUT_MS = 90_000


def pick_variant(page, label: str) -> None:  # type: ignore[no-untyped-def]
    page.locator("[data-testid='stSelectbox']").nth(1).click()
    page.get_by_role("option", name=re.compile(label)).click()


def test_profile_explain_and_soak(  # type: ignore[no-untyped-def]
    studio: Studio, page, own_model, tiny_model: Path, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    cnn = build_cnn(tmp_path / "cnn.onnx")
    dynamic = own_model(quantize_cnn(cnn, tmp_path / "cnn_dynamic.onnx", mode="dynamic"))
    first, job = last_id(studio, "models") + 1, last_id(studio, "jobs")
    page.goto(studio.url)
    for number, model in enumerate((own_model(cnn), dynamic, own_model(tiny_model)), start=first):
        upload(page, model)
        expect(page.get_by_text(f"Stored as model #{number}.")).to_be_visible(timeout=UI_TIMEOUT_MS)

    page.goto(f"{studio.url}/diagnostics?model={first}")
    expect(page.get_by_role("heading", name="Diagnostics")).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(page.get_by_text("No profile of this model yet")).to_be_visible()

    pick_variant(page, "cnn_dynamic")
    page.get_by_role("button", name="Profile").click()
    expect(page.get_by_text(re.compile(rf"Profile job #{job + 1} submitted"))).to_be_visible()
    expect(page.get_by_role("heading", name="Why INT8 is (not) faster")).to_be_visible(
        timeout=JOB_TIMEOUT_MS
    )
    expect(page.locator("strong", has_text="quantized dynamically")).to_be_visible()
    expect(page.get_by_text("Use static QDQ quantization with calibration data")).to_be_visible()
    expect(page.get_by_role("heading", name="FP32 vs variant, per op family")).to_be_visible()
    expect(page.get_by_role("heading", name="Per-layer quantization error")).to_be_visible()
    expect(page.get_by_text("Queue wait comes from a dynamic-batching run")).to_be_visible()
    expect(page.locator(".js-plotly-plot").first).to_be_visible()
    shot(page, "diagnostics-profile")

    pick_variant(page, f"#{first + 2} · tiny")
    page.get_by_role("button", name="Profile").click()
    expect(
        page.get_by_text(re.compile(rf"Job #{job + 2} failed: .*different models"))
    ).to_be_visible(timeout=JOB_TIMEOUT_MS)

    page.get_by_role("tab", name="Memory soak").click()
    expect(page.get_by_text("No soak of this model yet")).to_be_visible()
    page.get_by_role("spinbutton", name="Seconds").fill("2")
    page.get_by_role("button", name="Start soak").click()
    expect(page.get_by_text(re.compile(rf"Job #{job + 3}: Stable: RSS grows"))).to_be_visible(
        timeout=JOB_TIMEOUT_MS
    )
    shot(page, "diagnostics-soak")
    expect(page.get_by_text("Traceback")).to_have_count(0)
