"""The S3 artifact store against a real S3-compatible HTTP server (moto's server mode).

The last test is the whole path: the catalogue uploads a model to the bucket, and a real Celery
worker with its *own* data folder (no shared disk) downloads it once and benchmarks it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from optistudio.cli.launcher import free_port
from optistudio.core.errors import ArtifactStoreError, ModelRejected
from optistudio.core.model.intake import store_model
from optistudio.services.artifact_store import S3Store, model_folder, store_for
from optistudio.services.settings import Settings

boto3 = pytest.importorskip("boto3")
moto_server = pytest.importorskip("moto.server")

REPO = Path(__file__).resolve().parents[2]
BUCKET = "optistudio-test"
SECRET = "s3cret-Zq81-never-in-logs"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "optistudio-test-key",
    "AWS_SECRET_ACCESS_KEY": SECRET,
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server on a free port, with test credentials in this process's environment."""
    saved = {key: os.environ.get(key) for key in CREDENTIALS}
    os.environ.update(CREDENTIALS)
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=BUCKET)
    try:
        yield endpoint
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def s3_settings(data_dir: Path, endpoint: str, prefix: str) -> Settings:
    return Settings(
        data_dir=data_dir, artifact_store=f"s3://{BUCKET}/{prefix}", s3_endpoint_url=endpoint
    )


def objects(endpoint: str, prefix: str) -> dict[str, str]:
    """Key -> ETag of everything under the prefix."""
    listing = boto3.client("s3", endpoint_url=endpoint).list_objects_v2(
        Bucket=BUCKET, Prefix=prefix
    )
    return {item["Key"]: item["ETag"] for item in listing.get("Contents", [])}


def test_publish_uploads_once_and_a_worker_downloads_once(s3_endpoint, tmp_path, tiny_model):
    uploader = s3_settings(tmp_path / "studio", s3_endpoint, "once")
    stored = store_model(tiny_model, artifact_dir=uploader.artifact_dir)
    store = store_for(uploader)

    address = store.publish(stored)
    first = objects(s3_endpoint, "once/")
    assert (
        address
        == f"s3://{BUCKET}/once/models/{stored.info.sha256[:2]}/{stored.info.sha256}/model.onnx"
    )
    assert store.publish(stored) == address and objects(s3_endpoint, "once/") == first

    worker = S3Store(
        uploader.artifact_store, cache_dir=tmp_path / "worker", endpoint_url=s3_endpoint
    )
    local = worker.local_model(address, stored.info.sha256)
    assert local == model_folder(tmp_path / "worker", stored.info.sha256) / "model.onnx"
    assert local.read_bytes() == tiny_model.read_bytes()

    boto3.client("s3", endpoint_url=s3_endpoint).delete_object(
        Bucket=BUCKET, Key=address.removeprefix(f"s3://{BUCKET}/")
    )
    assert worker.local_model(address, stored.info.sha256) == local  # served from the cache


def test_external_data_travels_with_the_model(s3_endpoint, tmp_path):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((64, 64), np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "ext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64])],
        initializer=[weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    (tmp_path / "src").mkdir()
    source = tmp_path / "src" / "ext.onnx"
    onnx.save(model, source, save_as_external_data=True, location="ext.data", size_threshold=0)
    settings = s3_settings(tmp_path / "studio", s3_endpoint, "ext")
    stored = store_model(source, artifact_dir=settings.artifact_dir)

    address = store_for(settings).publish(stored)
    worker = S3Store(
        settings.artifact_store, cache_dir=tmp_path / "worker", endpoint_url=s3_endpoint
    )
    local = worker.local_model(address, stored.info.sha256)

    assert (local.parent / "ext.data").read_bytes() == (tmp_path / "src" / "ext.data").read_bytes()
    loaded = onnx.load(str(local))
    assert numpy_helper.to_array(loaded.graph.initializer[0]).sum() == 64 * 64


def test_a_changed_object_is_refused_by_its_hash(s3_endpoint, tmp_path, tiny_model, make_model):
    settings = s3_settings(tmp_path / "studio", s3_endpoint, "tampered")
    stored = store_model(tiny_model, artifact_dir=settings.artifact_dir)
    address = store_for(settings).publish(stored)
    other = make_model("other.onnx", features=4).read_bytes()
    boto3.client("s3", endpoint_url=s3_endpoint).put_object(
        Bucket=BUCKET, Key=address.removeprefix(f"s3://{BUCKET}/"), Body=other
    )

    worker = S3Store(
        settings.artifact_store, cache_dir=tmp_path / "worker", endpoint_url=s3_endpoint
    )
    with pytest.raises(ModelRejected, match="does not match its SHA-256"):
        worker.local_model(address, stored.info.sha256)
    assert not model_folder(tmp_path / "worker", stored.info.sha256).exists()


def test_a_missing_object_and_a_dead_endpoint_say_what_failed(s3_endpoint, tmp_path, tiny_model):
    settings = s3_settings(tmp_path / "studio", s3_endpoint, "missing")
    sha = "ab" * 32
    worker = S3Store(
        settings.artifact_store, cache_dir=tmp_path / "worker", endpoint_url=s3_endpoint
    )
    with pytest.raises(ModelRejected, match="missing from the artifact store"):
        worker.local_model(f"s3://{BUCKET}/missing/models/ab/{sha}/model.onnx", sha)

    dead = f"http://127.0.0.1:{free_port()}"
    stored = store_model(tiny_model, artifact_dir=settings.artifact_dir)
    with pytest.raises(ArtifactStoreError, match="Could not upload the model") as caught:
        S3Store(settings.artifact_store, cache_dir=tmp_path, endpoint_url=dead).publish(stored)
    assert SECRET not in str(caught.value) and "OPTISTUDIO_S3_ENDPOINT_URL" in str(caught.value)


def test_calibration_data_reaches_a_worker_through_the_bucket(s3_endpoint, tmp_path):
    import io
    import shutil

    import numpy as np

    from optistudio.services.catalog import store_dataset

    settings = s3_settings(tmp_path / "studio", s3_endpoint, "data")
    buffer = io.BytesIO()
    np.savez(buffer, x=np.arange(12, dtype=np.float32).reshape(3, 4))
    buffer.seek(0)
    recorded = store_dataset(settings, buffer, filename="calib.npz")
    original = recorded.read_bytes()
    shutil.rmtree(tmp_path / "studio")  # the worker cannot see the studio's disk

    worker = S3Store(
        settings.artifact_store, cache_dir=tmp_path / "worker", endpoint_url=s3_endpoint
    )
    local = worker.local_data(str(recorded))

    assert local == tmp_path / "worker" / "datasets" / recorded.name
    assert local.read_bytes() == original
    assert worker.local_data(str(recorded)) == local  # cached: no second download needed


@pytest.mark.integration
@pytest.mark.slow
def test_a_worker_without_the_shared_folder_benchmarks_a_model_from_s3(
    s3_endpoint, tmp_path, tiny_model
):
    from optistudio.cli.launcher import Stack, redis_command, redis_ready, wait_for, worker_command
    from optistudio.core.measure.benchmark import BenchmarkSpec
    from optistudio.db.session import make_session_factory
    from optistudio.services.catalog import add_model_file
    from optistudio.services.migrate import upgrade
    from optistudio.services.telemetry import telemetry_off_env
    from optistudio.studio.jobs_services import submit_benchmark
    from optistudio.workers.app import create_app

    studio = s3_settings(tmp_path / "studio", s3_endpoint, "e2e")
    studio.broker_url = f"redis://127.0.0.1:{free_port()}/0"
    upgrade(studio.database_url, lock_dir=studio.data_dir)
    factory = make_session_factory(studio.database_url)
    entry = add_model_file(factory, studio, tiny_model, name="tiny")

    env = telemetry_off_env()
    env.update(
        OPTISTUDIO_DATA_DIR=str(tmp_path / "worker"),  # its own disk: the model must come from S3
        OPTISTUDIO_DATABASE_URL=studio.database_url,
        OPTISTUDIO_BROKER_URL=studio.broker_url,
        OPTISTUDIO_ARTIFACT_STORE=studio.artifact_store,
        OPTISTUDIO_S3_ENDPOINT_URL=s3_endpoint,
    )
    stack, app = Stack(), create_app(studio)
    log_path = tmp_path / "worker.log"
    redis_port = int(studio.broker_url.rsplit(":", 1)[1].split("/")[0])
    with log_path.open("wb") as log:
        try:
            stack.start("redis", redis_command(redis_port, tmp_path / "redis"), output=log)
            wait_for(lambda: redis_ready(redis_port), "redis", stack)
            stack.start("worker", worker_command(studio), env, output=log, cwd=REPO)
            wait_for(lambda: bool(app.control.ping(timeout=0.5)), "worker", stack, timeout=90)
            spec = BenchmarkSpec(
                batch_sizes=[1],
                warmup_runs=1,
                min_runs=5,
                min_seconds=0.1,
                max_seconds=1.0,
                window_seconds=0.05,
            )
            send = lambda name, args: str(app.send_task(name, args=args).id)  # noqa: E731
            job_id = submit_benchmark(factory, model_id=entry.model_id, spec=spec, send=send)
            job = _wait_for_job(factory, job_id)
        finally:
            stack.stop()
            app.close()
    log_text = log_path.read_text(errors="replace")
    assert job.status.value == "succeeded", f"{job.message}\n{log_text[-3000:]}"
    cached = model_folder(tmp_path / "worker" / "artifacts", entry.info.sha256) / "model.onnx"
    assert cached.read_bytes() == tiny_model.read_bytes()
    assert SECRET not in log_text


def _wait_for_job(factory, job_id: int, timeout: float = 90.0):  # type: ignore[no-untyped-def]
    import time

    from optistudio.db.queries import get_job
    from optistudio.db.session import transaction

    deadline = time.monotonic() + timeout
    while True:
        with transaction(factory) as s:
            job = get_job(s, job_id=job_id)
            if (
                job.status.value in {"succeeded", "failed", "cancelled"}
                or time.monotonic() > deadline
            ):
                return job
        time.sleep(0.2)
