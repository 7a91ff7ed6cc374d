"""A decoder given as its folder: which .onnx is the model, and the files that travel with it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from decoder_models import build_tiny_decoder

from optistudio.core.errors import InvalidSpec
from optistudio.core.llm.folder import decoder_files, decoder_path, is_decoder_file


def test_the_folder_gives_model_onnx(tmp_path: Path) -> None:
    model = build_tiny_decoder(tmp_path)

    assert decoder_path(tmp_path) == model and is_decoder_file(tmp_path)


def test_genai_config_names_the_graph(tmp_path: Path) -> None:
    build_tiny_decoder(tmp_path)
    (tmp_path / "model.onnx").rename(tmp_path / "decoder.onnx")
    config = json.loads((tmp_path / "genai_config.json").read_text())
    config["model"]["decoder"]["filename"] = "decoder.onnx"
    (tmp_path / "genai_config.json").write_text(json.dumps(config))
    shutil.copyfile(tmp_path / "decoder.onnx", tmp_path / "other.onnx")

    assert decoder_path(tmp_path) == tmp_path / "decoder.onnx"


def test_two_unnamed_graphs_are_refused_with_their_names(tmp_path: Path) -> None:
    build_tiny_decoder(tmp_path, config=None)
    (tmp_path / "model.onnx").rename(tmp_path / "a.onnx")
    shutil.copyfile(tmp_path / "a.onnx", tmp_path / "b.onnx")

    with pytest.raises(InvalidSpec, match=r"2 \.onnx files \(a\.onnx, b\.onnx\)"):
        decoder_path(tmp_path)


def test_the_files_of_a_decoder_are_its_graph_configs_and_tokenizer(tmp_path: Path) -> None:
    model = build_tiny_decoder(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("not part of the model")

    names = [path.name for path in decoder_files(model)]

    assert names == ["model.onnx", "genai_config.json", "tokenizer.json"]


def test_an_ordinary_model_is_no_decoder(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"not onnx")

    assert not is_decoder_file(tmp_path / "model.onnx")
