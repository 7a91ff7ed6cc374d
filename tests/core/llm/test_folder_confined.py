"""Names a decoder's folder gives (genai_config.json's model.decoder.filename, a graph's external
data) are read only inside the folder, and a name pointing out is refused with one sentence
whether or not anything exists there."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from decoder_models import build_tiny_decoder

from optistudio.core.errors import InvalidSpec, ModelRejected
from optistudio.core.llm.card import model_files
from optistudio.core.llm.folder import decoder_path
from optistudio.core.model.contained import contained


def naming(folder: Path, filename: str) -> Path:
    build_tiny_decoder(folder)
    config = json.loads((folder / "genai_config.json").read_text())
    config["model"]["decoder"]["filename"] = filename
    (folder / "genai_config.json").write_text(json.dumps(config))
    return folder


def refusal(folder: Path) -> str:
    with pytest.raises(InvalidSpec) as refused:
        decoder_path(folder)
    return str(refused.value)


def test_a_missing_and_an_existing_outside_file_get_the_same_sentence(tmp_path: Path) -> None:
    outside = build_tiny_decoder(tmp_path / "elsewhere")

    messages = {
        name: refusal(naming(tmp_path / f"d{index}", name))
        for index, name in enumerate(
            ["/etc/passwd", "/nonexistent/x", str(outside), "../elsewhere/model.onnx", "C:\\x"]
        )
    }

    assert len(set(messages.values())) == 1, messages
    assert "not inside the folder" in messages["/etc/passwd"]


def test_a_link_leading_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    outside = build_tiny_decoder(tmp_path / "elsewhere")
    folder = naming(tmp_path / "decoder", "linked.onnx")
    (folder / "linked.onnx").symlink_to(outside)

    assert "not inside the folder" in refusal(folder)


def test_a_name_inside_the_folder_is_read_and_a_missing_one_falls_back(tmp_path: Path) -> None:
    folder = naming(tmp_path / "decoder", "sub/graph.onnx")
    (folder / "sub").mkdir()
    (folder / "model.onnx").rename(folder / "sub" / "graph.onnx")
    assert decoder_path(folder) == folder / "sub" / "graph.onnx"

    other = naming(tmp_path / "other", "absent.onnx")
    assert decoder_path(other) == other / "model.onnx"


def test_external_data_named_outside_the_folder_is_not_listed(tmp_path: Path) -> None:
    path = build_tiny_decoder(tmp_path / "decoder")
    model = onnx.load(str(path))
    weight = model.graph.initializer[0]
    weight.ClearField("raw_data")
    weight.data_location = onnx.TensorProto.EXTERNAL
    weight.external_data.add(key="location", value="/etc/passwd")
    onnx.save(model, str(path))

    with pytest.raises(ModelRejected, match="not inside its folder"):
        model_files(path)


@pytest.mark.parametrize(
    ("name", "inside"),
    [
        ("model.onnx", True),
        ("sub/w.bin", True),
        ("/etc/passwd", False),
        ("../x", False),
        ("sub/../../x", False),
        ("..\\x", False),
        ("D:x", False),
        ("", False),
        ("a\x00b", False),
    ],
)
def test_contained(tmp_path: Path, name: str, inside: bool) -> None:
    assert (contained(tmp_path, name) is not None) is inside
