"""What is stored is what intake checked: the address covers the graph and its external data,
external data may not take the stored graph's name or a hidden one, and a stored folder is
trusted only when it verifies."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from optistudio.core.errors import ModelRejected
from optistudio.core.model.content_address import content_address, verify_stored
from optistudio.core.model.intake import inspect_model, store_model


def external_graph(location: str = "weights.bin", rows: int = 4) -> onnx.ModelProto:
    """y = x @ W, W [rows, 1] float32 read from `location` (the data file is written apart)."""
    weight = onnx.TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[rows, 1])
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(rows * 4))):
        weight.external_data.add(key=key, value=value)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
        initializer=[weight],
    )
    return helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])


def write_model(
    folder: Path, weights: float, *, location: str = "weights.bin", name: str = "g.onnx"
) -> Path:
    """The graph as `name` in `folder` and its weights (all equal to `weights`) at `location`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / location).parent.mkdir(parents=True, exist_ok=True)
    (folder / location).write_bytes(np.full(4, weights, np.float32).tobytes())
    path = folder / name
    path.write_bytes(external_graph(location).SerializeToString())
    return path


def run(path: Path) -> float:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return float(session.run(None, {"x": np.ones((1, 4), np.float32)})[0].item())


def test_a_graph_without_external_data_keeps_the_hash_of_its_file(tiny_model: Path) -> None:
    info = inspect_model(tiny_model)

    assert info.sha256 == hashlib.sha256(tiny_model.read_bytes()).hexdigest()


def test_the_address_covers_external_data_by_name_and_bytes(tmp_path: Path) -> None:
    first = write_model(tmp_path / "a", 1.0)
    second = write_model(tmp_path / "b", 42.0)
    assert first.read_bytes() == second.read_bytes()  # byte-identical graphs

    one = store_model(first, artifact_dir=tmp_path / "store")
    two = store_model(second, artifact_dir=tmp_path / "store")

    assert one.info.sha256 != two.info.sha256 and one.path != two.path
    assert (run(one.path), run(two.path)) == (4.0, 168.0)
    graph_sha = hashlib.sha256(first.read_bytes()).hexdigest()
    weights_sha = hashlib.sha256((tmp_path / "a" / "weights.bin").read_bytes()).hexdigest()
    assert one.info.sha256 == content_address(graph_sha, [("weights.bin", weights_sha)])
    assert content_address(graph_sha, [("other.bin", weights_sha)]) != one.info.sha256


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        pytest.param("model.onnx", "the name the graph itself is stored under", id="graph-name"),
        pytest.param("MODEL.ONNX", "the name the graph itself is stored under", id="other-case"),
        pytest.param(".weights", "starting with '.'", id="hidden"),
        pytest.param("./weights.bin", "starting with '.'", id="dot-part"),
        pytest.param("sub/.cache/w.bin", "starting with '.'", id="hidden-folder"),
    ],
)
def test_external_data_may_not_take_the_stored_graphs_or_a_hidden_name(
    tmp_path: Path, location: str, expected: str
) -> None:
    path = write_model(tmp_path / "upload", 1.0, location=location)

    with pytest.raises(ModelRejected, match=expected):
        store_model(path, artifact_dir=tmp_path / "store")

    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("*.onnx"))


def test_external_data_in_a_subfolder_is_stored_under_its_name(tmp_path: Path) -> None:
    path = write_model(tmp_path / "upload", 3.0, location="weights/w.bin")

    stored = store_model(path, artifact_dir=tmp_path / "store")

    assert (stored.path.parent / "weights" / "w.bin").is_file() and run(stored.path) == 12.0


def test_a_stored_folder_that_does_not_verify_is_replaced(tmp_path: Path) -> None:
    source = write_model(tmp_path / "upload", 2.0)
    first = store_model(source, artifact_dir=tmp_path / "store")
    (first.path.parent / "weights.bin").write_bytes(np.full(4, 9.0, np.float32).tobytes())
    first.path.write_bytes(b"something else")

    again = store_model(source, artifact_dir=tmp_path / "store")

    assert again.path == first.path and again.created
    assert again.path.read_bytes() == source.read_bytes() and run(again.path) == 8.0
    verify_stored(again.path, again.info.sha256)
    leftovers = [p.name for p in again.path.parent.parent.iterdir()]
    assert leftovers == [again.info.sha256]  # no staging or stale folder left behind


def test_a_stored_folder_that_verifies_is_kept(tmp_path: Path) -> None:
    source = write_model(tmp_path / "upload", 2.0)
    first = store_model(source, artifact_dir=tmp_path / "store")
    inode = (first.path.parent / "weights.bin").stat().st_ino

    again = store_model(source, artifact_dir=tmp_path / "store")

    assert first.created and not again.created
    assert (again.path.parent / "weights.bin").stat().st_ino == inode


def test_changed_weights_are_refused_even_with_their_old_size_and_mtime(tmp_path: Path) -> None:
    stored = store_model(write_model(tmp_path / "upload", 2.0), artifact_dir=tmp_path / "store")
    verify_stored(stored.path, stored.info.sha256)  # passes, and is remembered
    weights = stored.path.parent / "weights.bin"
    before = weights.stat()
    weights.write_bytes(np.full(4, 5.0, np.float32).tobytes())
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))

    with pytest.raises(ModelRejected) as refused:
        verify_stored(stored.path, stored.info.sha256)

    assert refused.value.message.count(".") == 1  # one sentence
    assert "do not match the hash recorded" in refused.value.message
    assert refused.value.hint and "upload the model again" in refused.value.hint


def test_a_stored_graph_naming_files_outside_its_folder_does_not_verify(tmp_path: Path) -> None:
    stored = store_model(write_model(tmp_path / "upload", 2.0), artifact_dir=tmp_path / "store")
    secret = tmp_path / "secret.bin"
    secret.write_bytes((stored.path.parent / "weights.bin").read_bytes())
    stored.path.write_bytes(external_graph(str(secret)).SerializeToString())

    with pytest.raises(ModelRejected, match="do not match the hash recorded"):
        verify_stored(stored.path, stored.info.sha256)


def test_the_address_document_is_the_documented_json(tmp_path: Path) -> None:
    address = content_address("g" * 64, [("b.bin", "2" * 64), ("a.bin", "1" * 64)])

    document = {"external": [["a.bin", "1" * 64], ["b.bin", "2" * 64]], "graph": "g" * 64}
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    assert address == hashlib.sha256(text.encode()).hexdigest()
