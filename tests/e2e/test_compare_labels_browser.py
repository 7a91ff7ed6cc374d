"""What a result is labelled on Compare and on its share page, in real headless Chromium against a
real `optistudio up` stack: an OpenVINO BF16 run says bf16, a run measured while other processes
took the CPU keeps its CONTENDED flag."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from browser import UI_TIMEOUT_MS, Studio, bench_save, last_id, shot
from widgets import download, pick, share_link

from optistudio.core.machine.precisions import native_float
from tests.conftest import every_core_busy

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.shared_studio]


def stored_results(data_dir: Path) -> list[dict[str, object]]:
    """Every stored result with its figures, read from the stack's database."""
    from optistudio.db.selection import stored_results as read
    from optistudio.db.session import make_session_factory, transaction

    factory = make_session_factory(f"sqlite:///{data_dir / 'optistudio.db'}")
    with transaction(factory) as s:
        return read(s)


def open_shared(page, link: str):  # type: ignore[no-untyped-def]
    """The share link in a colleague's browser (a new context, downloads accepted)."""
    other = page.context.browser.new_context(accept_downloads=True)
    shared = other.new_page()
    shared.set_default_timeout(UI_TIMEOUT_MS)
    shared.goto(link)
    return shared


def test_a_bf16_run_is_labelled_bf16_on_compare_and_its_share_page(
    studio: Studio, page, own_model, tiny_model: Path, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    bf16 = native_float("bf16")
    if not bf16.native:
        pytest.skip(f"OpenVINO computes no BF16 on this CPU ({bf16.reason})")
    job = last_id(studio, "jobs") + 1
    tiny = own_model(tiny_model)
    bench_save(tiny, studio.data_dir, "--backend", "openvino", "--precision", "bf16")
    bench_save(tiny, studio.data_dir, "--batch", "1")  # ONNX Runtime FP32 beside it

    page.goto(f"{studio.url}/compare")
    pick(page, f"#{job} tiny [bf16] · openvino · batch 1 ·")
    pick(page, f"#{job + 1} tiny [fp32] · onnxruntime · batch 1 ·")
    expect(page.locator(".js-plotly-plot")).to_have_count(3, timeout=UI_TIMEOUT_MS)
    spread = page.locator(".js-plotly-plot").nth(2)  # the latency spread: a row per result
    expect(spread).to_contain_text(f"#{job} tiny · original [bf16] · openvino")
    expect(spread).not_to_contain_text("[fp32] · openvino")
    shot(page, "compare-bf16")

    shared = open_shared(page, share_link(page))
    expect(shared.get_by_text("Read-only snapshot")).to_be_visible()
    expect(shared.locator(".js-plotly-plot")).to_have_count(3, timeout=UI_TIMEOUT_MS)
    expect(shared.locator(".js-plotly-plot").nth(2)).to_contain_text(
        f"#{job} tiny · original [bf16] · openvino"
    )
    report = download(shared, "Download report (HTML)", tmp_path).read_text()
    assert f"#{job} tiny · original [bf16] · openvino" in report
    assert "[fp32] · openvino" not in report
    shot(shared, "shared-bf16")


def test_a_contended_run_keeps_its_flag_on_the_share_page(
    studio: Studio, page, own_model, tiny_model: Path, make_model, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    quiet = last_id(studio, "jobs") + 1
    busy = quiet + 1
    bench_save(own_model(tiny_model), studio.data_dir, "--batch", "1")
    with every_core_busy():
        wide = own_model(make_model("wide.onnx", features=64))
        bench_save(wide, studio.data_dir, "--batch", "1")
    contended = {r["job_id"]: r["metrics"]["contended"] for r in stored_results(studio.data_dir)}  # type: ignore[index]
    assert contended[busy] == 1.0, f"the busy cores were not seen: {contended}"

    page.goto(f"{studio.url}/compare")
    pick(page, f"#{quiet} tiny [fp32] · onnxruntime · batch 1 ·")
    pick(page, f"#{busy} wide [fp32] · onnxruntime · batch 1 ·")
    expect(page.locator(".js-plotly-plot")).to_have_count(3, timeout=UI_TIMEOUT_MS)
    shared = open_shared(page, share_link(page))

    warning = shared.locator("[data-testid='stAlert']").filter(has_text="Read with care")
    expect(warning).to_be_visible()
    expect(warning).to_contain_text(
        re.compile(
            rf"#{busy} wide · original \[fp32\] · onnxruntime · batch 1 · "
            r"(default threads|\d+ threads?) · CONTENDED"
        )
    )
    if contended[quiet] == 0.0:  # the quiet run is not flagged CONTENDED (another suite may have
        # been busy); UNSTABLE is the latency's own settling, which any machine may show
        expect(warning).not_to_contain_text(re.compile(rf"#{quiet} tiny[^\n]*CONTENDED"))
    expect(shared.locator(".js-plotly-plot").nth(2)).to_contain_text(
        f"#{busy} wide · original [fp32]"
    )
    shot(shared, "shared-contended")
