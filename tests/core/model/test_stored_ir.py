"""An OpenVINO IR made by the studio's passes is stored like an ONNX model: its .xml and .bin
under the address of both (content_address.ir_address), checked by OpenVINO's reader on the
staged copy, renamed into place; what is stored is verified before it is used."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from optistudio.core.errors import ModelRejected
from optistudio.core.model.content_address import file_sha256, ir_address, verify_stored
from optistudio.core.model.info import TensorSpec
from optistudio.core.model.stored_ir import store_ir
from tests.ir_models import cnn_ir


def test_the_ir_is_stored_as_model_xml_and_bin_under_the_hash_of_both(tmp_path: Path) -> None:
    ir, like = cnn_ir(tmp_path / "made")
    store = tmp_path / "store"

    stored = store_ir(ir, artifact_dir=store, like=like)

    sha = stored.info.sha256
    assert stored.path == store / "models" / sha[:2] / sha / "model.xml" and stored.created
    assert sorted(p.name for p in stored.path.parent.iterdir()) == ["model.bin", "model.xml"]
    pairs = [("model.xml", file_sha256(ir)), ("model.bin", file_sha256(ir.with_suffix(".bin")))]
    document = {"openvino_ir": [list(pair) for pair in sorted(pairs)]}
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    assert sha == ir_address(pairs) == hashlib.sha256(text.encode()).hexdigest()
    verify_stored(stored.path, sha)  # what was stored is what was hashed
    assert [p.name for p in (store / "models").rglob(".staging*")] == []


def test_the_same_ir_twice_is_stored_once(tmp_path: Path) -> None:
    ir, like = cnn_ir(tmp_path / "made")

    first = store_ir(ir, artifact_dir=tmp_path / "store", like=like)
    again = store_ir(ir, artifact_dir=tmp_path / "store", like=like)

    assert (again.path, again.created) == (first.path, False)


def test_other_weights_under_the_same_xml_are_another_model(tmp_path: Path) -> None:
    ir, like = cnn_ir(tmp_path / "made")
    first = store_ir(ir, artifact_dir=tmp_path / "store", like=like)
    weights = bytearray(ir.with_suffix(".bin").read_bytes())
    weights[-4:] = b"\x00\x00\x80\x3f"  # the last float becomes 1.0: same size, other bytes
    ir.with_suffix(".bin").write_bytes(bytes(weights))

    second = store_ir(ir, artifact_dir=tmp_path / "store", like=like)

    assert second.info.sha256 != first.info.sha256 and second.created


@pytest.mark.parametrize("which", ["model.bin", "model.xml"])
def test_a_stored_file_changed_afterwards_is_refused(tmp_path: Path, which: str) -> None:
    ir, like = cnn_ir(tmp_path / "made")
    stored = store_ir(ir, artifact_dir=tmp_path / "store", like=like)
    verify_stored(stored.path, stored.info.sha256)  # passes, and is remembered
    changed = stored.path.parent / which
    changed.write_bytes(changed.read_bytes() + b" ")

    with pytest.raises(ModelRejected, match="do not match the hash"):
        verify_stored(stored.path, stored.info.sha256)


def test_the_card_is_the_irs_interface_with_the_originals_dim_names(tmp_path: Path) -> None:
    ir, like = cnn_ir(tmp_path / "made")

    info = store_ir(ir, artifact_dir=tmp_path / "store", like=like).info

    assert info.inputs == [TensorSpec(name="x", dtype="float32", shape=["n", 3, 16, 16])]
    assert info.outputs == [TensorSpec(name="y", dtype="float32", shape=["n", 4])]
    assert info.producer.startswith("OpenVINO ") and "Convolution" in info.op_histogram
    size = ir.stat().st_size + ir.with_suffix(".bin").stat().st_size
    assert info.size_bytes == size and info.node_count == sum(info.op_histogram.values())
    assert (info.opsets, info.parameter_count) == (like.opsets, like.parameter_count)
    assert any("OpenVINO IR" in warning for warning in info.warnings)


def test_an_ir_fed_otherwise_than_its_original_is_refused_and_nothing_stays(
    tmp_path: Path,
) -> None:
    ir, like = cnn_ir(tmp_path / "made")
    other = like.model_copy(
        update={"inputs": [TensorSpec(name="image", dtype="float32", shape=[1, 3, 16, 16])]}
    )

    with pytest.raises(ModelRejected, match=r"inputs \(x\) are not those .* \(image\)"):
        store_ir(ir, artifact_dir=tmp_path / "store", like=other)

    assert not (tmp_path / "store" / "models").exists()


def test_an_xml_openvino_cannot_read_is_refused_in_a_sentence(tmp_path: Path) -> None:
    ir, like = cnn_ir(tmp_path / "made")
    ir.write_text(ir.read_text()[:200])  # cut short

    with pytest.raises(ModelRejected, match="OpenVINO could not read the IR") as refused:
        store_ir(ir, artifact_dir=tmp_path / "store", like=like)

    assert str(tmp_path) not in refused.value.message
    assert not (tmp_path / "store" / "models").exists()


def test_an_xml_without_its_weights_is_refused(tmp_path: Path) -> None:
    ir, like = cnn_ir(tmp_path / "made")
    ir.with_suffix(".bin").unlink()

    with pytest.raises(ModelRejected, match=r"variant.bin missing"):
        store_ir(ir, artifact_dir=tmp_path / "store", like=like)
