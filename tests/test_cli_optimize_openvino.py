"""`optistudio optimize --recipe int8_nncf_ov` on an opset-9 CNN, as a user runs it: the
OpenVINO IR variant is made, judged, timed, reported by the optimize job, copied with its
weights by --out, and stored in the catalog as a variant with backend openvino."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from cli_runner import run_in_process
from test_cli import optimize_args

from tests.core.passes.test_nncf import build_cnn


def optistudio(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    return run_in_process(
        list(args),
        set_env={"OPTISTUDIO_DATA_DIR": str(data_dir), "NNCF_CI": "1"},
        unset_env=("OPTISTUDIO_DATABASE_URL",),
    )


def test_the_ir_variant_is_made_judged_timed_and_exported(tmp_path: Path) -> None:
    model = build_cnn(tmp_path, opset=9)
    out = tmp_path / "variants"

    on_openvino = ("--target", "openvino", "--task", "none")
    args = optimize_args(
        model, *on_openvino, recipe="int8_nncf_ov", seconds="0.3", out=out, as_json=True, save=True
    )
    done = optistudio(*args, data_dir=tmp_path / "data")

    assert done.returncode == 0, done.stderr[-3000:]
    payload = json.loads(done.stdout)
    [variant] = payload["variants"]
    assert variant["status"] == "made", variant["error"]
    assert (variant["backend"], variant["precision"]) == ("openvino", "int8")
    assert variant["accuracy"]["min_cosine"] > 0.98 and variant["within_budget"]
    assert variant["verdict"] and variant["speedup"] > 0
    assert variant["model_id"] is not None  # a catalog entry of its own (backend openvino)
    assert Path(variant["path"]).suffix == ".xml" and Path(variant["path"]).is_file()
    [step] = variant["steps"]
    assert step["details"]["opset"] == {"from": 9, "to": 9}
    exported = Path(payload["files"]["int8_nncf_ov"])
    assert exported == out / "int8_nncf_ov.xml"
    assert exported.with_suffix(".bin").stat().st_size > 0
