"""`optistudio operator-profile` and `optistudio soak` as a user runs them: a real process, real files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from diagnostic_models import build_cnn, quantize_cnn
from test_cli import optistudio  # noqa: E402


@pytest.fixture(scope="module")
def cnn_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("cli_diag")
    cnn = build_cnn(folder / "cnn.onnx")
    return cnn, quantize_cnn(cnn, folder / "cnn_dynamic.onnx", mode="dynamic")


def test_profile_with_a_dynamic_int8_variant_explains_it(
    cnn_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    cnn, dynamic = cnn_pair

    done = optistudio(
        "operator-profile",
        str(cnn),
        "--variant",
        str(dynamic),
        "--runs",
        "3",
        "--json",
        data_dir=tmp_path,
    )

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {n["graph_node"] for n in report["profile"]["nodes"] if n["family"] == "Conv"} == {
        "conv1",
        "conv2",
    }
    assert "dynamic_conv" in {f["rule"] for f in report["findings"]}
    assert report["comparison"]["families"]
    assert report["layer_errors"][0]["rank"] == 1
    assert [s["stage"] for s in report["breakdown"]["stages"]] == ["inference"]


def test_profile_table_on_openvino(cnn_pair: tuple[Path, Path], tmp_path: Path) -> None:
    done = optistudio(
        "operator-profile",
        str(cnn_pair[0]),
        "--backend",
        "openvino",
        "--runs",
        "2",
        data_dir=tmp_path,
    )

    assert done.returncode == 0, done.stderr
    assert "Convolution" in done.stdout and "precision" in done.stdout
    assert "no INT8 to explain" in done.stdout
    assert "Stages per batch of 1: inference" in done.stdout


def test_the_former_verb_profile_still_runs_the_operator_profile(
    cnn_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    done = optistudio("profile", str(cnn_pair[0]), "--runs", "2", "--json", data_dir=tmp_path)

    assert done.returncode == 0, done.stderr
    assert {n["graph_node"] for n in json.loads(done.stdout)["profile"]["nodes"]} >= {"conv1"}


def test_the_help_names_the_operator_profile_and_marks_its_former_name(tmp_path: Path) -> None:
    done = optistudio("--help", data_dir=tmp_path)

    assert done.returncode == 0, done.stderr
    assert "operator-profile (profile)" in done.stdout  # argparse names an alias so
    assert "formerly 'profile', still accepted" in " ".join(done.stdout.split())


def test_profile_of_a_file_that_is_not_a_model_exits_2_with_the_reason(tmp_path: Path) -> None:
    junk = tmp_path / "notes.onnx"
    junk.write_text("hello")

    done = optistudio("operator-profile", str(junk), "--json", data_dir=tmp_path)

    assert done.returncode == 2
    assert "not an ONNX model" in done.stderr and "Traceback" not in done.stderr


def test_profile_of_two_different_models_is_refused(
    cnn_pair: tuple[Path, Path], tiny_model: Path, tmp_path: Path
) -> None:
    done = optistudio(
        "operator-profile",
        str(cnn_pair[0]),
        "--variant",
        str(tiny_model),
        "--runs",
        "2",
        data_dir=tmp_path,
    )

    assert done.returncode == 2
    assert "different models" in done.stderr and "Traceback" not in done.stderr


def test_soak_json_gives_the_verdict_and_interval(tiny_model: Path, tmp_path: Path) -> None:
    done = optistudio("soak", str(tiny_model), "--seconds", "1", "--json", data_dir=tmp_path)

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "stable"
    assert report["slope_low"] <= report["slope_bytes"] <= report["slope_high"]


def test_profile_per_layer_error_on_the_users_data(
    cnn_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    data = tmp_path / "calib.npz"
    np.savez(data, x=np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32))

    done = optistudio(
        "operator-profile", str(cnn_pair[0]), "--variant", str(cnn_pair[1]), "--calib", str(data),
        "--runs", "2", "--json", data_dir=tmp_path,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (
        "calib.npz" in report["layer_error_note"] and "Synthetic" not in report["layer_error_note"]
    )
    assert report["layer_errors"][0]["samples"] == 4
