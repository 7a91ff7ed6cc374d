"""Issue 39, cases 1-3, through the studio's own upload entry (`add_upload`): the stored graph
is the one intake checked, the address covers external data, a decoder folder's config cannot
name a file outside the folder; and a stored model whose bytes changed is refused when opened."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from decoder_models import build_tiny_decoder
from onnx import TensorProto, helper

from optistudio.core.errors import ModelRejected
from optistudio.db.models import Model
from optistudio.db.session import transaction
from optistudio.services.artifact_store import SharedFolderStore
from optistudio.services.bundles import bundle_source
from optistudio.services.catalog import add_upload
from optistudio.studio.model_services import model_file


def zipped(folder: Path, prefix: str = "upload/") -> io.BytesIO:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            archive.write(path, prefix + path.relative_to(folder).as_posix())
    buffer.seek(0)
    return buffer


def external_tensor(name: str, dtype: int, dims: list[int], location: str, length: int):
    tensor = onnx.TensorProto(name=name, data_type=dtype, dims=dims)
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(length))):
        tensor.external_data.add(key=key, value=value)
    return tensor


def matmul_graph(location: str = "weights.bin") -> onnx.ModelProto:
    """y = x @ W with W [4, 1] float32 kept in `location`."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
        initializer=[external_tensor("W", TensorProto.FLOAT, [4, 1], location, 16)],
    )
    return helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])


def bytes_graph(location: str, size: int) -> onnx.ModelProto:
    """y = x + B, B a uint8 [size] table read raw from `location`."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "B"], ["y"])],
        "reads_a_file",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [size])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [size])],
        initializer=[external_tensor("B", TensorProto.UINT8, [size], location, size)],
    )
    return helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])


def weights_folder(folder: Path, value: float) -> Path:
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(matmul_graph().SerializeToString())
    (folder / "weights.bin").write_bytes(np.full(4, value, np.float32).tobytes())
    return folder


def run(path: Path) -> float:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return float(session.run(None, {"x": np.ones((1, 4), np.float32)})[0].item())


def model_count(factory) -> int:  # type: ignore[no-untyped-def]
    with transaction(factory) as s:
        return s.query(Model).count()


def stored_graphs(settings) -> list[Path]:  # type: ignore[no-untyped-def]
    return sorted((settings.artifact_dir / "models").rglob("*.onnx"))


def test_case_1_a_graph_whose_weights_take_the_stored_graphs_name_is_refused(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path: Path
) -> None:
    folder = tmp_path / "evil"
    folder.mkdir()
    refused_alone = matmul_graph(location="/etc/hostname")  # refused on its own: absolute
    (folder / "model.onnx").write_bytes(refused_alone.SerializeToString())
    size = (folder / "model.onnx").stat().st_size
    (folder / "x.onnx").write_bytes(bytes_graph("model.onnx", size).SerializeToString())
    genai = {"model": {"decoder": {"filename": "x.onnx"}}}
    (folder / "genai_config.json").write_text(json.dumps(genai))

    with pytest.raises(ModelRejected, match="the name the graph itself is stored under"):
        add_upload(db_factory, app_settings, zipped(folder), filename="evil.zip")

    assert model_count(db_factory) == 0 and stored_graphs(app_settings) == []


def test_case_2_identical_graphs_with_other_weights_are_two_models(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path: Path
) -> None:
    ones = weights_folder(tmp_path / "ones", 1.0)
    other = weights_folder(tmp_path / "other", 10656.0)
    assert (ones / "model.onnx").read_bytes() == (other / "model.onnx").read_bytes()

    first = add_upload(db_factory, app_settings, zipped(ones), filename="ones.zip")
    second = add_upload(db_factory, app_settings, zipped(other), filename="other.zip")

    assert first.created and second.created and first.model_id != second.model_id
    assert first.info.sha256 != second.info.sha256
    assert (run(first.path), run(second.path)) == (4.0, 42624.0)


def decoder_naming(folder: Path, filename: str) -> Path:
    build_tiny_decoder(folder)
    config = json.loads((folder / "genai_config.json").read_text())
    config["model"]["decoder"]["filename"] = filename
    (folder / "genai_config.json").write_text(json.dumps(config))
    return folder


def test_case_3_a_decoder_config_naming_a_file_outside_its_folder_is_refused_alike(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path: Path
) -> None:
    outside = build_tiny_decoder(tmp_path / "someone-elses")  # a real decoder on the server
    names = ["/etc/passwd", "/nonexistent/x", str(outside), "../../someone-elses/model.onnx"]
    messages = []
    for index, name in enumerate(names):
        folder = decoder_naming(tmp_path / f"upload{index}", name)
        with pytest.raises(ModelRejected) as refused:
            add_upload(db_factory, app_settings, zipped(folder), filename="d.zip")
        messages.append(str(refused.value))

    assert len(set(messages)) == 1, messages
    assert "not inside the folder" in messages[0]
    assert model_count(db_factory) == 0 and stored_graphs(app_settings) == []


def test_a_stored_decoders_genai_config_names_the_stored_graph(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path: Path
) -> None:
    folder = decoder_naming(tmp_path / "decoder", "decoder.onnx")
    (folder / "model.onnx").rename(folder / "decoder.onnx")

    entry = add_upload(db_factory, app_settings, zipped(folder), filename="d.zip")

    stored = json.loads((entry.path.parent / "genai_config.json").read_text())
    assert entry.path.name == "model.onnx"
    assert stored["model"]["decoder"]["filename"] == "model.onnx"


def test_a_later_upload_adds_nothing_to_a_stored_decoders_folder(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path: Path
) -> None:
    folder = tmp_path / "decoder"
    build_tiny_decoder(folder)
    first = add_upload(db_factory, app_settings, zipped(folder), filename="d.zip")
    (folder / "tokenizer.json").write_text('{"from": "someone else"}')

    again = add_upload(db_factory, app_settings, zipped(folder), filename="d2.zip")

    assert again.model_id == first.model_id and not again.created
    assert not (first.path.parent / "tokenizer.json").exists()


def test_a_tampered_stored_model_is_refused_when_opened_and_mended_by_a_new_upload(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path: Path
) -> None:
    folder = weights_folder(tmp_path / "model", 1.0)
    entry = add_upload(db_factory, app_settings, zipped(folder), filename="m.zip")
    address, sha256 = str(entry.path), entry.info.sha256
    (entry.path.parent / "weights.bin").write_bytes(np.full(4, 7.0, np.float32).tobytes())
    store = SharedFolderStore(app_settings.artifact_dir)

    with pytest.raises(ModelRejected) as refused:
        store.local_model(address, sha256)
    with pytest.raises(ModelRejected, match="do not match the hash recorded"):
        bundle_source(db_factory, app_settings, entry.model_id)  # the export's way in
    assert model_file(app_settings, path=address, sha256=sha256) is None  # the studio's

    message = refused.value.message
    assert message.endswith(".") and message.count(". ") == 0 and "\n" not in message
    assert str(app_settings.artifact_dir) not in message
    again = add_upload(db_factory, app_settings, zipped(folder), filename="m.zip")
    assert again.model_id == entry.model_id  # the same row, its folder replaced
    assert store.local_model(address, sha256) == entry.path and run(entry.path) == 4.0
