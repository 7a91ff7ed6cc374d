"""`optistudio bench`'s text table says when a figure was measured on a contended machine, as
its --json and the studio do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from optistudio.cli import print_table

QUICK = ["--min-seconds", "0.05", "--max-seconds", "1", "--min-runs", "5", "--warmup", "1"]


def bench_json(model: Path, data_dir: Path) -> dict:
    env = dict(os.environ, OPTISTUDIO_DATA_DIR=str(data_dir))
    env.pop("OPTISTUDIO_DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "optistudio.cli", "bench", str(model), "--json", *QUICK],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_text_table_flags_a_contended_measurement(tiny_model: Path, tmp_path: Path, capsys):
    payload = bench_json(tiny_model, tmp_path / "data")
    row = payload["results"][0]
    assert {"contended", "other_cores"} <= set(row)  # --json carries the flag and its cause

    # The same row as a run on a busy machine stores it (the monitor's verdict, its busy cores).
    busy = payload | {"results": [row | {"contended": 1.0, "other_cores": 1.3}]}
    quiet = payload | {"results": [row | {"contended": 0.0}]}
    print_table(busy)
    flagged = capsys.readouterr().out.splitlines()[2]
    print_table(quiet)
    plain = capsys.readouterr().out.splitlines()[2]

    assert flagged.endswith(", CONTENDED (1.3 cores busy elsewhere)")
    assert "CONTENDED" not in plain and plain.startswith(row["backend"])
