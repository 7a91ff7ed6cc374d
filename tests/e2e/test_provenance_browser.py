"""Data labelled as what it was (issue 44, item 3), in real headless Chromium against a real
`optistudio up` stack: an optimize run of an image classifier given no data is judged on the
built-in samples (photographs made on the fly), and says so on the Optimize page (its warning,
its data line, its note) and in Compare's exports (the JSON's accuracy notes and the HTML
report), never "your data"."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from browser import UI_TIMEOUT_MS, Studio, idle, last_id, shot
from test_compare_variants_browser import RECIPES, optimize_save, stored_jobs
from widgets import download, pick

from tests.conftest import image_classifier

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.shared_studio]

BUILTIN = "built-in samples, not your data"


def test_built_in_samples_are_named_on_the_optimize_page_and_in_the_exports(
    studio: Studio, page, own_model, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    model_id, before = last_id(studio, "models") + 1, last_id(studio, "jobs")
    model = own_model(image_classifier(tmp_path / "classifier.onnx"))
    optimize_save(model, studio.data_dir, tmp_path / "variants")
    (job_id, job), *_ = stored_jobs(studio.data_dir, after=before).items()
    judged_on = {v["accuracy"]["data"] for v in job["result"]["variants"]}  # type: ignore[index]
    assert judged_on == {"builtin"}, judged_on  # no data was given; the photographs fit

    page.goto(f"{studio.url}/optimize?model={model_id}")
    heading = page.get_by_role("heading", name=re.compile(rf"Job #{job_id} · classifier"))
    expect(heading).to_be_visible(timeout=UI_TIMEOUT_MS)
    warning = page.locator("[data-testid='stAlert']").filter(
        has_text="Judged on built-in samples, not your data"
    )
    expect(warning).to_be_visible()
    expect(page.get_by_text(re.compile(r"Data: built-in samples: image: "))).to_be_visible()
    expect(page.get_by_text(re.compile(r"^Note: Built-in samples, not your data"))).to_be_visible()
    shot(page, "optimize-built-in-samples")

    page.goto(f"{studio.url}/compare")
    heading = page.get_by_role("heading", name="Stored results side by side")
    expect(heading).to_be_visible(timeout=UI_TIMEOUT_MS)  # the studio's first page: imports
    labels = {name: f"#{job_id} classifier · {label}" for name, label in RECIPES.items()}
    pick(page, f"#{job_id} classifier [fp32] · original, optimize run")
    pick(page, labels["graph"])
    pick(page, labels["int8_dynamic"])
    # the picks are the page's once its run has written them to the link (three plots show
    # with two rows too: a CI run's JSON report held only the first two)
    page.wait_for_url(re.compile(rf"results=v{job_id}\.o%2Cv{job_id}\.0%2Cv{job_id}\.1(&|$)"))
    expect(page.locator(".js-plotly-plot")).to_have_count(3, timeout=UI_TIMEOUT_MS)
    idle(page)

    report = json.loads(download(page, "Download JSON", tmp_path).read_text())
    notes = {row["key"]: row["accuracy_note"] for row in report["rows"]}
    variants = [note for key, note in notes.items() if not key.endswith(".o")]
    assert len(variants) == 2 and all(f"accuracy on {BUILTIN}" in n for n in variants), notes
    assert not any(re.search(r"(?<!not )your data", note) for note in notes.values()), notes
    idle(page)
    html = download(page, "Download report (HTML)", tmp_path).read_text()
    text = html.split("(Pareto frontier)</h2>")[0]  # the charts' own script follows
    assert text.count(f"accuracy on {BUILTIN}") == 2, "the report names no samples"
    assert not re.search(r"(?<!not )your data", text)
    assert "Traceback" not in page.content()
