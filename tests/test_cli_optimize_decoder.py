"""`optistudio optimize DIR --recipe auto --calib text --json` on a decoder, as a user runs it:
a real process on a tiny decoder's folder, its one JSON document parsed and read back as the
result the worker stores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from decoder_models import TinyShape, build_tiny_decoder
from decoder_tokenizers import TEXT, train_tokenizer
from test_cli import optimize_args

from optistudio.cli import main
from optistudio.services.jobresults import OptimizeJobResult

SECONDS = "0.05"


def _optimize(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OPTISTUDIO_DATA_DIR=str(data_dir), NNCF_CI="1")
    env.pop("OPTISTUDIO_DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "optistudio.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return build_tiny_decoder(tmp_path / "tiny").parent


def test_optimize_on_a_decoders_folder_gives_an_ordinary_result(
    folder: Path, tmp_path: Path
) -> None:
    np.save(tmp_path / "ids.npy", np.random.default_rng(2).integers(0, TinyShape().vocab, 300))
    recipes = "int4_weight_only,int8_weight_only"

    done = _optimize(
        *optimize_args(folder, "--calib", str(tmp_path / "ids.npy"), recipe=recipes,
                       seconds=SECONDS, out=tmp_path / "out", as_json=True),
        data_dir=tmp_path / "data",
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    result = OptimizeJobResult.model_validate({k: v for k, v in payload.items() if k != "files"})
    assert result.task == "text_generation" and result.headline
    assert [v.recipe.name for v in result.made] == recipes.split(",")
    for variant in result.made:
        assert variant.decoding is not None and variant.accuracy is not None
        assert variant.decoding.size_bytes < variant.decoding.original_size_bytes
        assert "perplexity_increase" in variant.accuracy.task_metrics
        exported = Path(payload["files"][variant.recipe.name])
        assert exported == tmp_path / "out" / variant.recipe.name / "model.onnx"
        assert exported.is_file() and (exported.parent / "genai_config.json").is_file()


def test_a_text_the_decoder_cannot_tokenize_is_refused_in_one_sentence(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "text.txt").write_text(TEXT)

    code = main(
        optimize_args(folder, "--calib", str(tmp_path / "text.txt"), out=tmp_path / "out",
                      as_json=True)
    )  # fmt: skip

    error = json.loads(capsys.readouterr().out)["error"]
    assert code == 2 and error["code"] == "data_mismatch"
    assert error["message"] == (
        "The decoder's folder has no tokenizer.json, so text.txt cannot be turned into its "
        "tokens: give the folder with tokenizer.json, or token ids as .npy."
    )


def test_a_text_is_tokenized_by_the_folders_tokenizer_and_travels_with_the_variant(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train_tokenizer(folder)
    (tmp_path / "text.txt").write_text(TEXT)

    code = main(
        optimize_args(folder, "--calib", str(tmp_path / "text.txt"), recipe="int8_weight_only",
                      seconds=SECONDS, out=tmp_path / "out")
    )  # fmt: skip

    shown = capsys.readouterr().out
    assert code == 0
    assert "data: text.txt tokenized by tokenizer.json" in shown
    assert "tok/s b1" in shown and "int8_weight_only" in shown
    assert (tmp_path / "out" / "int8_weight_only" / "tokenizer.json").is_file()
