"""An OpenVINO IR variant (NNCF's INT8 on the OpenVINO model) is a catalog entry: its own row
with backend openvino and its precision, its .xml and .bin stored together, and handed out by
the artifact store only while both files match the address recorded for them; the export
bundles it as OpenVINO IR."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from optistudio.core.errors import ModelRejected
from optistudio.db.models import Model
from optistudio.db.queries import get_model
from optistudio.db.session import transaction
from optistudio.services.artifact_store import SharedFolderStore, store_for
from optistudio.services.backend_variants import add_backend_variant
from optistudio.services.bundles import bundle_source
from optistudio.services.catalog import add_model_file, add_upload
from tests.core.passes.test_nncf import build_cnn
from tests.ir_models import cnn_ir

RECIPE = {"name": "int8_nncf_ov", "label": "INT8 NNCF on the OpenVINO model", "steps": []}


def stored_ir(factory: Any, settings: Any, folder: Path) -> tuple[Model, Model]:
    """The CNN stored as an original, and an IR of it stored as its openvino INT8 variant."""
    ir, like = cnn_ir(folder / "made")
    original = add_model_file(factory, settings, build_cnn(folder), name="cnn")
    entry = add_backend_variant(
        factory,
        settings,
        ir,
        name="cnn · int8_nncf_ov@openvino",
        parent_id=original.model_id,
        recipe=RECIPE,
        backend="openvino",
        precision="int8",
        threads=2,
        like=like,
    )
    with transaction(factory) as s:
        rows = [get_model(s, model_id=i) for i in (original.model_id, entry.model_id)]
        assert rows[0] is not None and rows[1] is not None
        for model in rows:
            s.expunge(model)
    return rows[0], rows[1]


def test_the_ir_is_a_model_of_its_own_with_backend_and_precision(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path: Path
) -> None:
    original, variant = stored_ir(db_factory, app_settings, tmp_path)

    assert variant.id != original.id and variant.parent_id == original.id
    assert (variant.backend, variant.precision, variant.threads) == ("openvino", "int8", 2)
    assert Path(variant.path).name == "model.xml" and variant.filename == "variant.xml"
    assert variant.sha256 != original.sha256
    local = store_for(app_settings).local_model(variant.path, variant.sha256)
    assert local == Path(variant.path) and local.with_suffix(".bin").is_file()


def test_local_model_refuses_an_ir_whose_weights_were_changed(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path: Path
) -> None:
    _, variant = stored_ir(db_factory, app_settings, tmp_path)
    weights = Path(variant.path).with_suffix(".bin")
    tampered = bytearray(weights.read_bytes())
    tampered[len(tampered) // 2] ^= 0xFF  # one byte flipped, same size
    weights.write_bytes(bytes(tampered))

    with pytest.raises(ModelRejected, match="do not match the hash"):
        store_for(app_settings).local_model(variant.path, variant.sha256)


def test_an_ir_is_found_under_this_machines_mount_of_the_store(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path: Path
) -> None:
    _, variant = stored_ir(db_factory, app_settings, tmp_path)
    elsewhere = f"/mnt/other-host/models/{variant.sha256[:2]}/{variant.sha256}/model.xml"

    found = SharedFolderStore(app_settings.artifact_dir).local_model(elsewhere, variant.sha256)

    assert found == Path(variant.path)


def test_the_bundle_source_of_an_ir_variant_runs_it_on_openvino(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path: Path
) -> None:
    _, variant = stored_ir(db_factory, app_settings, tmp_path)

    source = bundle_source(db_factory, app_settings, variant.id)

    assert source.model_path == Path(variant.path)
    assert (source.backend, source.precision, source.threads) == ("openvino", "int8", 2)


def test_an_uploaded_ir_is_still_refused_as_not_onnx(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path: Path
) -> None:
    ir, _ = cnn_ir(tmp_path / "made")

    with ir.open("rb") as stream, pytest.raises(ModelRejected, match="not an ONNX model"):
        add_upload(db_factory, app_settings, stream, filename="variant.xml")

    assert not (app_settings.artifact_dir / "models").exists()
