"""`--free-dims` on the shared input flags: a file that declares fixed dims its graph does not
need runs at the shapes its users feed, through the checked copy."""

from __future__ import annotations

import json
from pathlib import Path

from test_cli import optistudio

from tests.core.passes.free_dims_models import fully_convolutional

QUICK = ["--min-seconds", "0.05", "--max-seconds", "0.5", "--warmup", "1"]
FRAME = ["--shape", "x=1,3,480,640"]


def test_bench_at_a_frame_on_a_file_declared_at_10x3x32x32(tmp_path: Path) -> None:
    model = fully_convolutional(tmp_path / "fcn.onnx")

    run = optistudio(
        "bench", str(model), *FRAME, "--free-dims", "--json", *QUICK, data_dir=tmp_path
    )

    assert run.returncode == 0, run.stderr
    payload = json.loads(run.stdout)
    assert payload["results"][0]["input_shapes"] == {"x": [1, 3, 480, 640]}
    assert payload["model"]["inputs"][0]["shape"] == ["batch", 3, "height", "width"]
    assert "free dims: freed x dims 0 (batch), 2 (height), 3 (width)" in run.stderr


def test_without_the_flag_the_refusal_offers_it(tmp_path: Path) -> None:
    model = fully_convolutional(tmp_path / "fcn.onnx")

    run = optistudio("bench", str(model), *FRAME, "--json", *QUICK, data_dir=tmp_path)

    assert run.returncode == 2
    error = json.loads(run.stdout)["error"]
    assert error["message"].startswith("Shape [1, 3, 480, 640] does not fit input 'x'")
    assert error["hint"].startswith(
        "This file declares a batch of 10 and 32x32 where you ask a batch of 1 and 480x640"
    )
    assert "--free-dims" in error["hint"]


def test_batching_profile_runs_on_the_freed_copy(tmp_path: Path) -> None:
    model = fully_convolutional(tmp_path / "fcn.onnx", size=64)

    run = optistudio(
        "batching", "latency-profile", str(model), "--shape", "x=1,3,128,128", "--free-dims",
        "--max-batch-size", "2", "--instance-counts", "1", "--rate", "5", "--quick", "--json",
        data_dir=tmp_path,
    )  # fmt: skip

    assert run.returncode == 0, run.stderr
    payload = json.loads(run.stdout)
    assert payload["profile"]["batch_sizes"] == [1, 2]
    assert payload["inputs"]["freed_dims"]["original"] == str(model)
