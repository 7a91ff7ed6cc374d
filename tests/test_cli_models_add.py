"""Models of any size on the command line (issue 42, item 5): the upload limit is the browser's
only. With OPTISTUDIO_MAX_UPLOAD_MB=1, a decoder folder of more than 1 MiB is optimized from
its local folder (which said "The model is 1.3 MB, over the 1.0 MB limit" before) and stored
by `optistudio models add`, once."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cli_runner import run_in_process
from large_decoder import MiB, folder_bytes, large_decoder
from test_cli import optimize_args


def _cli(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {"OPTISTUDIO_DATA_DIR": str(data_dir), "OPTISTUDIO_MAX_UPLOAD_MB": "1", "NNCF_CI": "1"}
    return run_in_process(list(args), set_env=env, unset_env=("OPTISTUDIO_DATABASE_URL",))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    made = large_decoder(tmp_path / "big-decoder").parent
    assert folder_bytes(made) > MiB
    return made


def test_models_add_stores_a_local_decoder_over_the_upload_limit_once(
    folder: Path, tmp_path: Path
) -> None:
    first = _cli("models", "add", str(folder), "--json", data_dir=tmp_path / "data")
    again = _cli("models", "add", str(folder), data_dir=tmp_path / "data")

    assert first.returncode == 0, first.stderr[-2000:]
    added = json.loads(first.stdout)
    assert added["created"] and added["name"] == "big-decoder" and added["size_bytes"] > MiB
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.strip() == f"#{added['model_id']} big-decoder: already stored (1.3 MB)."


def test_optimize_takes_a_local_decoder_folder_over_the_upload_limit(
    folder: Path, tmp_path: Path
) -> None:
    done = _cli(
        *optimize_args(folder, recipe="int8_weight_only", seconds="0.05", out=tmp_path / "out",
                       as_json=True), data_dir=tmp_path / "data",
    )  # fmt: skip

    assert done.returncode == 0, done.stderr[-2000:]
    [variant] = json.loads(done.stdout)["variants"]
    assert variant["status"] == "made"


def test_models_add_of_a_missing_path_is_one_sentence(tmp_path: Path) -> None:
    done = _cli("models", "add", str(tmp_path / "nothing.onnx"), data_dir=tmp_path / "data")

    assert done.returncode == 2
    assert "No model file at 'nothing.onnx'." in done.stderr and "Traceback" not in done.stderr
