"""A stored OpenVINO IR variant travels through the S3 artifact store as an ONNX model does: its
model.xml and model.bin uploaded once under the address of both, downloaded into a worker's
cache and verified there before the path is handed out (moto's S3 server, as in
test_artifact_store_s3.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from optistudio.core.errors import ModelRejected
from optistudio.core.model.stored_ir import store_ir
from optistudio.services.artifact_store import S3Store, model_folder, store_for
from tests.integration import test_artifact_store_s3 as s3
from tests.integration.test_artifact_store_s3 import BUCKET, boto3, objects, s3_settings
from tests.ir_models import cnn_ir

s3_endpoint = s3.s3_endpoint
"""The moto S3 server of test_artifact_store_s3.py, a fixture shared with it."""


def test_an_ir_is_uploaded_once_and_downloaded_with_its_weights(  # type: ignore[no-untyped-def]
    s3_endpoint, tmp_path: Path
) -> None:
    ir, like = cnn_ir(tmp_path / "made")
    settings = s3_settings(tmp_path / "studio", s3_endpoint, "ir")
    stored = store_ir(ir, artifact_dir=settings.artifact_dir, like=like)
    sha = stored.info.sha256

    address = store_for(settings).publish(stored)
    worker = S3Store(
        settings.artifact_store, cache_dir=tmp_path / "worker", endpoint_url=s3_endpoint
    )
    local = worker.local_model(address, sha)

    assert address == f"s3://{BUCKET}/ir/models/{sha[:2]}/{sha}/model.xml"
    assert sorted(objects(s3_endpoint, "ir/")) == [
        f"ir/models/{sha[:2]}/{sha}/model.bin",
        f"ir/models/{sha[:2]}/{sha}/model.xml",
    ]
    assert local == model_folder(tmp_path / "worker", sha) / "model.xml"
    assert local.with_suffix(".bin").read_bytes() == ir.with_suffix(".bin").read_bytes()


def test_a_changed_bin_in_the_bucket_is_refused_on_download(  # type: ignore[no-untyped-def]
    s3_endpoint, tmp_path: Path
) -> None:
    ir, like = cnn_ir(tmp_path / "made")
    settings = s3_settings(tmp_path / "studio", s3_endpoint, "ir-changed")
    stored = store_ir(ir, artifact_dir=settings.artifact_dir, like=like)
    address = store_for(settings).publish(stored)
    weights = address.removeprefix(f"s3://{BUCKET}/").replace("model.xml", "model.bin")
    boto3.client("s3", endpoint_url=s3_endpoint).put_object(
        Bucket=BUCKET, Key=weights, Body=b"\x00" * 64
    )
    worker = S3Store(
        settings.artifact_store, cache_dir=tmp_path / "worker", endpoint_url=s3_endpoint
    )

    with pytest.raises(ModelRejected, match="downloaded from .* does not match"):
        worker.local_model(address, stored.info.sha256)

    assert not model_folder(tmp_path / "worker", stored.info.sha256).exists()
