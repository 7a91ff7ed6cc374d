"""`optistudio compare`: the Compare page's report on stored benchmarks and optimize variants."""

from __future__ import annotations

import json
from pathlib import Path

from test_cli import optimize_args, optistudio

QUICK_BENCH = ["--batch", "1", "--min-runs", "5", "--warmup", "1", "--min-seconds", "0"]


def _saved(*args: str, data: Path) -> dict:  # type: ignore[type-arg]
    done = optistudio(*args, "--save", "--json", data_dir=data)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_compare_benchmarks_and_variants_as_the_page_does(tiny_model: Path, tmp_path: Path):
    data = tmp_path / "data"
    bench = _saved("bench", str(tiny_model), *QUICK_BENCH, data=data)
    made = _saved(*optimize_args(tiny_model, recipe="graph", seconds="0.1", out=tmp_path / "v"),
                  data=data)  # fmt: skip
    bench_job, optimize_job = bench["job_id"], made["job_id"]

    done = optistudio("compare", str(bench_job), "--variant", str(optimize_job),
                      "--html", str(tmp_path / "r.html"), "--json", data_dir=data)  # fmt: skip

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    rows = {row["key"]: row for row in report["rows_read"]}
    assert f"v{optimize_job}.o" in rows and f"v{optimize_job}.0" in rows
    assert any(key.startswith(f"{bench_job}.onnxruntime.") for key in rows)
    for row in rows.values():
        assert row["backend"] and row["device"] == "cpu" and row["precision"]
        assert isinstance(row["flags"], list)
        assert all(flag.upper() in row["label"] for flag in row["flags"])
    assert report["environment"] and "logical cores" in report["environment"]
    assert len(report["table"]) == len(rows)
    html = (tmp_path / "r.html").read_text()
    assert html.startswith("<!DOCTYPE html>") or "<html" in html

    plain = optistudio("compare", f"v{optimize_job}.0", data_dir=data)
    assert plain.returncode == 0, plain.stderr
    assert "measured on:" in plain.stdout and "device" in plain.stdout


def test_compare_names_what_it_cannot_read(tmp_path: Path) -> None:
    data = tmp_path / "d"
    nothing = optistudio("compare", "--json", data_dir=data)
    unknown = optistudio("compare", "4242", data_dir=data)
    garbled = optistudio("compare", "12.x", "--json", data_dir=data)

    assert (
        nothing.returncode == 2
        and "Nothing to compare" in json.loads(nothing.stdout)["error"]["message"]
    )
    assert unknown.returncode == 2 and "Job #4242 has no stored benchmark result" in unknown.stderr
    assert (
        garbled.returncode == 2
        and "is not a result" in json.loads(garbled.stdout)["error"]["message"]
    )
    assert "Traceback" not in nothing.stderr + unknown.stderr + garbled.stderr
