"""Every verdict the Compare page shows is true, in real headless Chromium against a real
`optistudio up` stack: an optimize run's variants (judged without the user's data) compared
as the run timed them show a dash and why for the percentiles the run never measured (no
"None"), name the samples they were judged on (never "your data"), and the picker's filter
lists only labels that hold what was typed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from browser import UI_TIMEOUT_MS, Studio, bench_save, last_id, shot
from test_compare_variants_browser import RECIPES, optimize_save, stored_jobs
from widgets import download, pick

from optistudio.core.report.snapshot import NOT_MEASURED

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.shared_studio]


def test_compare_shows_dashes_with_reasons_and_names_the_samples(
    studio: Studio, page, own_model, tiny_model: Path, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    tiny, before = own_model(tiny_model), last_id(studio, "jobs")
    optimize_save(tiny, studio.data_dir, tmp_path / "variants")
    (job_id, job), *_ = stored_jobs(studio.data_dir, after=before).items()
    judged_on = {v["accuracy"]["data"] for v in job["result"]["variants"]}  # type: ignore[index]
    assert "user" not in judged_on  # no data was given
    bench_save(tiny, studio.data_dir, "--batch", "1")  # percentiles beside the run's p50

    page.goto(f"{studio.url}/compare")
    heading = page.get_by_role("heading", name="Stored results side by side")
    expect(heading).to_be_visible(timeout=UI_TIMEOUT_MS)
    box = page.locator("[data-testid='stMultiSelect'] input").first
    box.click()
    page.keyboard.type("resnet")  # no stored label holds it: nothing is offered to add
    expect(page.get_by_role("option", name=re.compile("tiny"))).to_have_count(0)
    page.keyboard.press("Escape")
    pick(page, f"#{job_id} tiny [fp32] · original, optimize run")
    pick(page, f"#{job_id} tiny · {RECIPES['int8_dynamic']} [int8] · onnxruntime · optimize run")
    pick(page, f"#{job_id + 1} tiny [fp32] · onnxruntime · batch 1 ·")
    expect(page.locator(".js-plotly-plot")).to_have_count(3, timeout=UI_TIMEOUT_MS)
    expect(page.get_by_text(NOT_MEASURED).first).to_be_visible()  # the caption under the table
    shot(page, "compare-verdicts")

    table = download(page, "Download report (HTML)", tmp_path).read_text().split("<h2>")[1]
    assert f"title='{NOT_MEASURED}'>—</td>" in table and ">None<" not in table
    report = json.loads(download(page, "Download JSON", tmp_path).read_text())
    notes = [row["accuracy_note"] for row in report["rows"][1:2]]  # the variant's
    assert notes and all("not your data" in note for note in notes), notes
