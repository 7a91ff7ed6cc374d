"""Commands on a model file run at its checked proposal where the flags leave sizes free.

The model here runs only at sides that are multiples of 64: at the old default of 16 and at the
proposed 224 it fails; the check finds 256, says so on stderr, and the command runs there.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sized_models import build_blocks, build_counted
from test_cli import QUICK, optistudio

RAN_AT_256 = "inputs: ran at x=1,1,256,256: after 224 failed (Reshape node"


@pytest.fixture(scope="module")
def k64(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_blocks(tmp_path_factory.mktemp("resolved") / "k64.onnx", 64)


def test_bench_without_shapes_runs_where_the_old_default_failed(k64: Path, tmp_path: Path) -> None:
    old = optistudio(
        "bench", str(k64), "--dim", "x.2=16", "--dim", "x.3=16", *QUICK, data_dir=tmp_path
    )

    done = optistudio("bench", str(k64), "--batch", "1,2", "--json", *QUICK, data_dir=tmp_path)

    assert old.returncode == 2
    assert "could not run this model on inputs x=[1, 1, 16, 16]" in old.stderr
    assert done.returncode == 0, done.stderr
    assert RAN_AT_256 in done.stderr
    payload = json.loads(done.stdout)  # stdout holds the one JSON document, nothing else
    assert [r["input_shapes"] for r in payload["results"]] == [
        {"x": [1, 1, 256, 256]},
        {"x": [2, 1, 256, 256]},
    ]
    assert payload["spec"]["dims"] == {"x.2": 256, "x.3": 256}


def test_the_flags_still_win_and_nothing_is_checked(k64: Path, tmp_path: Path) -> None:
    done = optistudio(
        "bench", str(k64), "--shape", "x=1,1,64,128", "--json", *QUICK, data_dir=tmp_path
    )

    assert done.returncode == 0, done.stderr
    assert "inputs:" not in done.stderr
    assert json.loads(done.stdout)["results"][0]["input_shapes"] == {"x": [1, 1, 64, 128]}


def test_soak_json_says_what_it_ran_at(k64: Path, tmp_path: Path) -> None:
    done = optistudio(
        "soak", str(k64), "--seconds", "0.3", "--batch", "1,2", "--json", data_dir=tmp_path
    )

    assert done.returncode == 0, done.stderr
    assert RAN_AT_256 in done.stderr
    report = json.loads(done.stdout)
    assert report["inputs"]["shapes"] == {"x": [1, 1, 256, 256]} and report["inputs"]["runs"] == 2
    assert report["inputs"]["how"].startswith("after 224 failed")
    assert {tuple(v["x"]) for v in report["variants"]} == {(1, 1, 256, 256), (2, 1, 256, 256)}


def test_batching_simulate_profiles_at_the_checked_size(k64: Path, tmp_path: Path) -> None:
    done = optistudio(
        "batching", "simulate", str(k64), "--rate", "20", "--max-batch-size", "2", "--quick",
        "--json",
        data_dir=tmp_path,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert RAN_AT_256 in done.stderr
    assert json.loads(done.stdout)["inputs"]["shapes"] == {"x": [1, 1, 256, 256]}


def test_a_model_no_candidate_fits_is_refused_naming_the_flag(tmp_path: Path) -> None:
    odd = build_counted(tmp_path / "odd.onnx", [1, 3, 7, 7000])

    done = optistudio("bench", str(odd), "--json", data_dir=tmp_path)

    assert done.returncode == 2 and "Traceback" not in done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "invalid_spec"
    assert error["message"].startswith("x could not run at 224, 256, 320, 416, 512, 640")
    assert error["message"].endswith("give its size with --shape x=1,3,H,W")


def test_inputs_check_shows_the_proposal_that_ran(k64: Path, tmp_path: Path) -> None:
    done = optistudio("inputs", str(k64), "--check", "--json", data_dir=tmp_path)

    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["profile"]["shapes"] == {"x": [1, 1, 256, 256]}
    assert payload["check"]["runs"] == 2 and payload["lines"] == ["x: [batch, 1, 256, 256]"]
    assert payload["profile"]["guessed"]["x.2"] == "256: 224 did not run; checked by a run"
