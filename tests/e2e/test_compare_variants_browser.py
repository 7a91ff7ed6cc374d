"""Compare with an optimize run's variants, as the run timed them (no second benchmark), in real
headless Chromium against a real `optistudio up` stack."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from browser import UI_TIMEOUT_MS, Studio, last_id, shot
from widgets import download, pick

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.shared_studio]
RECIPES = {"graph": "Graph optimization", "int8_dynamic": "INT8 dynamic"}


def optimize_save(model: Path, data_dir: Path, out: Path) -> None:
    """Store a model and an optimize run of it through the CLI (`optimize --save`)."""
    env = dict(os.environ, OPTISTUDIO_DATA_DIR=str(data_dir))
    env.pop("OPTISTUDIO_DATABASE_URL", None)
    recipes = [flag for name in RECIPES for flag in ("--recipe", name)]
    done = subprocess.run(
        [sys.executable, "-m", "optistudio.cli", "optimize", str(model), *recipes]
        + ["--seconds", "0.2", "--out", str(out), "--save"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr


def stored_jobs(data_dir: Path, *, after: int = 0) -> dict[int, dict[str, object]]:
    """Each job's kind and result, read from the stack's database: the jobs numbered above
    `after` (a shared studio's jobs of other tests are at or below it)."""
    from optistudio.db.queries import list_jobs
    from optistudio.db.session import make_session_factory, transaction

    factory = make_session_factory(f"sqlite:///{data_dir / 'optistudio.db'}")
    with transaction(factory) as s:
        jobs = list_jobs(s)
        return {j.id: {"kind": j.kind.value, "result": j.result} for j in jobs if j.id > after}


def test_optimize_variants_are_compared_as_their_run_timed_them(
    studio: Studio, page, own_model, tiny_model: Path, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    before = last_id(studio, "jobs")
    optimize_save(own_model(tiny_model), studio.data_dir, tmp_path / "variants")
    (job_id, job), *others = stored_jobs(studio.data_dir, after=before).items()
    assert job["kind"] == "optimize" and others == []
    timed = {v["recipe"]["name"]: v for v in job["result"]["variants"]}  # type: ignore[index]

    page.goto(f"{studio.url}/compare")
    heading = page.get_by_role("heading", name="Stored results side by side")
    expect(heading).to_be_visible(timeout=UI_TIMEOUT_MS)  # the studio's first page: imports
    pick(page, f"#{job_id} tiny [fp32] · original, optimize run")
    pick(page, f"#{job_id} tiny · {RECIPES['graph']} [fp32] · onnxruntime · optimize run")
    pick(page, f"#{job_id} tiny · {RECIPES['int8_dynamic']} [int8] · onnxruntime · optimize run")
    page.wait_for_url(re.compile(rf"results=v{job_id}\.o%2Cv{job_id}\.0%2Cv{job_id}\.1(&|$)"))
    expect(page.get_by_role("heading", name="Error vs p50 latency")).to_be_visible()
    expect(page.locator(".js-plotly-plot")).to_have_count(3, timeout=UI_TIMEOUT_MS)
    shot(page, "compare-variants")

    table = download(page, "Download report (HTML)", tmp_path).read_text().split("<h2>")[1]
    for label, precision in zip(RECIPES.values(), ("fp32", "int8"), strict=True):
        assert f"#{job_id} tiny · {label} [{precision}] · onnxruntime" in table, table
    assert f"#{job_id} tiny · original [fp32] · onnxruntime · batch 1 · " in table, table
    assert " t0" not in table and " b1 " not in table  # threads and batch in words
    legend = page.locator(".js-plotly-plot").first  # the Pareto view: one entry per result
    for name in ("original", *RECIPES.values()):
        expect(legend).to_contain_text(f"#{job_id} {name}")
    expect(legend).to_contain_text("all: tiny · onnxruntime · batch 1")
    report = json.loads(download(page, "Download JSON", tmp_path).read_text())
    rows = {row["key"]: row for row in report["rows"]}
    assert list(rows) == [f"v{job_id}.o", f"v{job_id}.0", f"v{job_id}.1"]
    for index, name in enumerate(RECIPES):
        row, variant = rows[f"v{job_id}.{index}"], timed[name]
        assert row["metrics"]["p50_ms"] == variant["variant_p50_ms"]  # the run's own timing
        assert row["metrics"]["speedup_vs_original"] == variant["speedup"]
        assert row["metrics"]["mean_cosine"] == variant["accuracy"]["mean_cosine"]
        assert row["precision"] == ("int8" if name == "int8_dynamic" else "fp32")
        assert f"optimize job #{job_id}" in row["accuracy_note"]
    original = rows[f"v{job_id}.o"]["metrics"]
    assert original["p50_ms"] == timed["graph"]["original_p50_ms"]
    assert list(stored_jobs(studio.data_dir, after=before)) == [job_id]  # nothing benchmarked again
    assert "Traceback" not in page.content()
