"""Run a model on every backend and precision of the CPU, then see them side by side."""

from __future__ import annotations

import re

import pytest
from browser import UI_TIMEOUT_MS, Studio, idle, shot

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_run_on_every_target_then_compare_backends(studio: Studio, page) -> None:
    from playwright.sync_api import expect

    from optistudio.core.backends import get_backend
    from optistudio.core.backends.inventory import hardware_inventory, targets

    page.goto(studio.url)
    expect(page.get_by_role("heading", name="Models")).to_be_visible(timeout=UI_TIMEOUT_MS)
    page.get_by_role("button", name="Add sample").click()  # Tiny CNN
    expect(page.get_by_text("Stored as model #1.")).to_be_visible()
    expect(page.get_by_text("Target (backend · device · precision)")).to_be_visible()
    # The sample's rerun (the page takes ?model=1) may still run: a click then can be lost.
    idle(page)
    page.get_by_role("button", name="Run on every target of cpu").click()
    submitted = page.get_by_text(re.compile(r"Submitted \d+ benchmark jobs"))
    expect(submitted).to_be_visible()
    count = int(re.search(r"Submitted (\d+)", submitted.inner_text()).group(1))
    openvino = get_backend("openvino").availability().ok
    # What this CPU offers (int8 targets are for quantized models; the Tiny CNN is FP32):
    # OpenVINO adds bf16 only where the CPU has AVX-512 BF16 or AMX.
    offered = targets(hardware_inventory())
    cpu_targets = [t for t in offered if t[1] == "cpu" and t[2] != "int8"]
    assert count == len(cpu_targets) >= (2 if openvino else 1)

    page.goto(f"{studio.url}/jobs")
    expect(page.get_by_text(re.compile(r"^Measured batch sizes")).first).to_be_visible(
        timeout=150_000
    )
    expect(page.get_by_role("button", name="Cancel")).to_have_count(0, timeout=150_000)
    expect(page.get_by_text(re.compile("failed"))).to_have_count(0)

    page.goto(f"{studio.url}/results?model=1")
    expect(page.get_by_role("heading", name="Backends side by side")).to_be_visible()
    expect(page.get_by_text("Lower is faster")).to_be_visible()
    shot(page, "backends")
    table = page.locator("[data-testid='stDataFrame']").first
    expect(table).to_contain_text("onnxruntime · cpu · fp32")
    if openvino:
        expect(table).to_contain_text("openvino · cpu · fp32")
