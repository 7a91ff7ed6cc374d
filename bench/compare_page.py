"""How long the Compare page takes to render as the stored history grows.

Seeds a fresh SQLite database (migrated by Alembic) with N stored benchmark results (one per job,
12 metrics each, a tenth of them on variants with accuracy reports from optimize jobs, two
environments), then renders the Compare page through Streamlit's AppTest with a selection in the
URL, once to warm up and then several times, and prints the median wall time of one page run:

  A. 1,000 results selected from 10,000 in the database  (the figure the issue asks for)
  B. 1,000 selected from 1,000                           (baseline: same selection, small history)
  C. 10 selected from 10,000                             (baseline: same history, small selection)

A/B shows what the history costs, A/C what the selection costs. AppTest runs the script and
serialises every element, but no browser paints it: the browser's own rendering of a 10,000-option
multiselect and a 1,000-row table is not included.

Run: .venv/bin/python bench/compare_page.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("STREAMLIT_BROWSER_GATHER_USAGE_STATS", "false")

from sqlalchemy import insert  # noqa: E402

from optistudio.db.models import Environment, Job, JobKind, JobStatus, Measurement, Model  # noqa: E402
from optistudio.db.session import make_session_factory, transaction  # noqa: E402

METRICS = ("p10_ms", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "min_ms", "max_ms", "mean_ms")
MODELS = 100
INFO = {"sha256": "0" * 64, "size_bytes": 1, "ir_version": 8, "opsets": {"": 17}, "inputs": []}


def seed(url: str, results: int) -> list[str]:
    """`results` stored results; returns their keys, newest first."""
    from optistudio.services.migrate import upgrade

    upgrade(url, lock_dir=Path(url.removeprefix("sqlite:///")).parent)
    factory = make_session_factory(url)
    rng = random.Random(0)
    now = datetime.now(UTC)
    with transaction(factory) as s:
        for env in range(2):
            data = {"cpu_model": f"CPU {env}", "libraries": {"onnxruntime": f"1.2{env}.0"}}
            s.execute(insert(Environment), [{"id": env + 1, "fingerprint": str(env), "data": data}])
        models = [_model(i) for i in range(1, MODELS + 1)]
        s.execute(insert(Model), models)
        s.execute(insert(Job), [_optimize_job(m["id"]) for m in models if m["parent_id"] is None])
        jobs, rows = [], []
        for job_id in range(1000, 1000 + results):
            model_id = rng.randint(1, MODELS)
            jobs.append(_job(job_id, JobKind.benchmark, model_id, rng.randint(1, 2), now))
            rows += _measurements(job_id, rng.uniform(0.5, 20.0), rng.choice([1, 8]))
        s.execute(insert(Job), jobs)
        s.execute(insert(Measurement), rows)
    factory.kw["bind"].dispose()
    return [f"{j['id']}.onnxruntime.{r}.2" for j, r in zip(jobs, _batches(rows), strict=True)][::-1]


def _model(i: int) -> dict:
    parent = i - 1 if i % 10 == 0 else None  # every tenth model is a variant of the one before
    return {
        "id": i,
        "sha256": f"{i:064d}",
        "name": f"model{i}",
        "filename": "model.onnx",
        "path": "/nonexistent/model.onnx",
        "size_bytes": 1,
        "info": INFO,
        "parent_id": parent,
        "precision": "int8" if parent else "fp32",
        "created_at": datetime.now(UTC),
    }


def _job(job_id: int, kind: JobKind, model_id: int, env: int | None, now: datetime) -> dict:
    return {
        "id": job_id,
        "kind": kind,
        "status": JobStatus.succeeded,
        "spec": {},
        "model_id": model_id,
        "environment_id": env,
        "created_at": now,
        "finished_at": now,
    }


def _optimize_job(original: int) -> dict:
    job = _job(original, JobKind.optimize, original, None, datetime.now(UTC))
    variant = {"model_id": original + 1, "accuracy": {"mean_cosine": 0.995, "data": "synthetic"}}
    return job | {"result": {"variants": [variant] if (original + 1) % 10 == 0 else []}}


def _measurements(job_id: int, p50: float, batch: int) -> list[dict]:
    values = dict(zip(METRICS, (0.9, 1.0, 1.1, 1.15, 1.3, 0.8, 1.6, 1.02), strict=True))
    rows = [{"metric": m, "value": p50 * f} for m, f in values.items()]
    rows += [
        {"metric": "throughput", "value": batch * 1000 / p50},
        {"metric": "peak_rss_mb", "value": 150.0},
        {"metric": "stable", "value": 1.0},
        {"metric": "samples", "value": 200.0},
    ]
    common = {"job_id": job_id, "backend": "onnxruntime", "batch_size": batch, "threads": 2}
    return [common | r | {"unit": ""} for r in rows]


def _batches(rows: list[dict]) -> list[int]:
    return [r["batch_size"] for r in rows[::12]]


def compare_page() -> None:
    from optistudio.studio.views.compare import render

    render()


def render_once(data_dir: Path, selected: list[str]) -> float:
    """Wall time of one full run of the Compare page with `selected` in the URL."""
    from streamlit.testing.v1 import AppTest

    from optistudio.services.settings import get_settings
    from optistudio.studio import state

    os.environ["OPTISTUDIO_DATA_DIR"] = str(data_dir)
    get_settings.cache_clear()
    state.settings.clear()
    state.session_factory.clear()
    at = AppTest.from_function(compare_page, default_timeout=600)
    at.query_params["results"] = ",".join(selected)
    at.query_params["baseline"] = selected[0]
    at.query_params["budget"] = "5"
    start = time.perf_counter()
    at.run()
    elapsed = time.perf_counter() - start
    if at.exception or len(at.get("plotly_chart")) != 3:
        raise SystemExit(f"the page did not render: {at.exception}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        big, small = Path(tmp) / "big", Path(tmp) / "small"
        t0 = time.perf_counter()
        big_keys = seed(f"sqlite:///{big / 'optistudio.db'}", 10_000)
        small_keys = seed(f"sqlite:///{small / 'optistudio.db'}", 1_000)
        print(f"seeded 10,000 + 1,000 results in {time.perf_counter() - t0:.1f} s")
        scenarios = {
            "A": (big, big_keys[:1000]),
            "B": (small, small_keys),
            "C": (big, big_keys[:10]),
        }
        times: dict[str, list[float]] = {name: [] for name in scenarios}
        for round_ in range(args.rounds + 1):  # interleaved; round 0 warms up and is not counted
            for name, (folder, keys) in scenarios.items():
                elapsed = render_once(folder, keys)
                if round_:
                    times[name].append(elapsed)
    a, b, c = (statistics.median(times[name]) for name in "ABC")
    print(f"A  1,000 of 10,000: {a:6.2f} s per page run (median of {args.rounds}, interleaved)")
    print(f"B  1,000 of  1,000: {b:6.2f} s   A/B = {a / b:.2f} (cost of the larger history)")
    print(f"C     10 of 10,000: {c:6.2f} s   A/C = {a / c:.2f} (cost of the larger selection)")


if __name__ == "__main__":
    main()
