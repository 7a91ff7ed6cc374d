"""The shared-folder store: concurrent uploads of one file keep one copy, and workers find a
model by its hash under their own mount of the folder."""

from __future__ import annotations

import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from optistudio.core.errors import ModelRejected
from optistudio.core.model.intake import store_model
from optistudio.services.artifact_store import SharedFolderStore, model_folder
from optistudio.services.catalog import add_upload

UPLOADS = 8


def test_concurrent_uploads_of_the_same_file_store_one_copy(db_factory, app_settings, tiny_model):
    from optistudio.db.models import Model
    from optistudio.db.session import transaction

    start = threading.Barrier(UPLOADS)

    def upload(index: int) -> int:
        start.wait()
        with tiny_model.open("rb") as stream:
            return add_upload(
                db_factory, app_settings, stream, filename=f"copy{index}.onnx"
            ).model_id

    with ThreadPoolExecutor(UPLOADS) as pool:
        ids = list(pool.map(upload, range(UPLOADS)))

    assert len(set(ids)) == 1
    with transaction(db_factory) as s:
        assert s.query(Model).count() == 1
    stored = sorted(
        p.relative_to(app_settings.artifact_dir)
        for p in app_settings.artifact_dir.rglob("*")
        if p.is_file()
    )
    assert [p.name for p in stored] == ["model.onnx"]  # no second copy, no temp file left
    assert not any((app_settings.data_dir / "incoming").iterdir())


def test_a_worker_finds_a_model_under_its_own_mount_of_the_folder(tmp_path, tiny_model):
    studio_dir = tmp_path / "studio-mount"
    stored = store_model(tiny_model, artifact_dir=studio_dir)
    address = SharedFolderStore(studio_dir).publish(stored)
    worker_dir = tmp_path / "worker-mount"  # the same share, mounted at another path
    shutil.copytree(studio_dir, worker_dir)
    shutil.rmtree(studio_dir)

    local = SharedFolderStore(worker_dir).local_model(address, stored.info.sha256)

    assert local == model_folder(worker_dir, stored.info.sha256) / "model.onnx"
    with pytest.raises(ModelRejected, match="mount the shared artifact folder"):
        SharedFolderStore(tmp_path / "empty").local_model(address, stored.info.sha256)
    assert Path(address).name == "model.onnx"


class EndlessStream:
    """An upload that never ends; counts what was read from it."""

    def __init__(self) -> None:
        self.read_bytes = 0

    def read(self, size: int = -1) -> bytes:
        chunk = b"\0" * (size if size > 0 else 1024**2)
        self.read_bytes += len(chunk)
        return chunk


def test_an_oversized_upload_is_refused_while_copying_and_leaves_nothing(db_factory, app_settings):
    from optistudio.db.models import Model
    from optistudio.db.session import transaction

    app_settings.max_upload_mb = 1
    stream = EndlessStream()

    with pytest.raises(ModelRejected, match="larger than the upload limit of 1 MiB"):
        add_upload(db_factory, app_settings, stream, filename="huge.onnx")  # type: ignore[arg-type]

    assert stream.read_bytes <= 2 * 1024**2  # stopped at the first chunk past the limit
    assert not any((app_settings.data_dir / "incoming").iterdir())
    assert not app_settings.artifact_dir.exists() or not any(
        app_settings.artifact_dir.rglob("*.onnx")
    )
    with transaction(db_factory) as s:
        assert s.query(Model).count() == 0


def test_store_urls_are_checked_at_start() -> None:
    from pydantic import ValidationError

    from optistudio.services.artifact_store import S3Store, parse_s3_url, store_for
    from optistudio.services.settings import Settings

    assert parse_s3_url("s3://bucket/a/b/") == ("bucket", "a/b")
    assert parse_s3_url("s3://bucket") == ("bucket", "")
    for bad in ["http://bucket/x", "s3://", "s3:///prefix", "bucket/prefix"]:
        with pytest.raises(ValidationError, match="artifact_store"):
            Settings(artifact_store=bad)
    assert isinstance(store_for(Settings(artifact_store="s3://b/p")), S3Store)
    assert isinstance(store_for(Settings()), SharedFolderStore)
