"""Where stored models live, so that every worker can reach them.

Two stores behind one small interface, chosen by `OPTISTUDIO_ARTIFACT_STORE`:

- the shared folder (default): `DATA_DIR/artifacts`, mounted on every machine that runs a worker;
- an S3-compatible bucket (`s3://bucket/prefix`): the catalogue uploads each model once, and a
  worker downloads it once into its own artifact folder, which is then its cache.

Either way a model's address is its SHA-256 (`models/<sha[:2]>/<sha>/model.onnx`, external data
files beside it; the hash covers the graph and every external data file, by name and bytes:
optistudio.core.model.content_address), so the same bytes are stored once. An OpenVINO IR that
a pass of the studio made is stored the same way as `model.xml` + `model.bin`, its address the
hash of both (`optistudio.core.model.stored_ir`); the address's file name says which it is. Whoever opens a
stored model (`local_model`: a worker, the export, the studio) gets it only after it verifies
against that hash (once per process while its files are unchanged); a mismatch is refused in
one sentence.
Credentials come from the usual AWS_* environment (boto3's own chain) and are never logged.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from optistudio.core.errors import ArtifactStoreError, ModelRejected
from optistudio.core.model.content_address import verify_stored
from optistudio.core.model.intake import StoredModel
from optistudio.services.settings import Settings, get_settings

S3_SCHEME = "s3://"
MODEL_FILE = "model.onnx"
IR_FILE = "model.xml"
"""A stored OpenVINO IR's graph (its weights: model.bin beside it)."""
GRAPH_FILES = (MODEL_FILE, IR_FILE)
DATA_FOLDER = "datasets"
_SHA_NAME = re.compile(r"[0-9a-f]{64}\.\w+")
_CHUNK = 1024**2


class ArtifactStore(Protocol):
    def publish(self, stored: StoredModel) -> str:
        """Make a model that intake stored locally reachable by every worker; its address."""
        ...

    def local_model(self, address: str, sha256: str) -> Path:
        """A local path of the model at `address` (downloaded once if it must be), verified
        against `sha256`: ModelRejected when its files do not match."""
        ...

    def publish_data(self, path: Path) -> None:
        """Make a stored data file (datasets/<sha256><suffix>) reachable by every worker."""
        ...

    def local_data(self, recorded: str) -> Path:
        """A local path of the data file a job names (downloaded once if it must be)."""
        ...


def model_folder(artifact_dir: Path, sha256: str) -> Path:
    """The content-addressed folder of a model (the layout optistudio.core.model.intake.store_model writes)."""
    return Path(artifact_dir) / "models" / sha256[:2] / sha256


def graph_name(address: str) -> str:
    """The stored graph's file name an address ends with: model.xml for an IR, else
    model.onnx (an address from elsewhere, or from before IRs were stored)."""
    name = PurePosixPath(address).name
    return name if name in GRAPH_FILES else MODEL_FILE


def store_for(settings: Settings) -> ArtifactStore:
    """The store these settings configure."""
    if settings.artifact_store:
        return S3Store(
            settings.artifact_store,
            cache_dir=settings.artifact_dir,
            endpoint_url=settings.s3_endpoint_url or None,
        )
    return SharedFolderStore(settings.artifact_dir)


def local_data_file(recorded: str) -> Path:
    """The local path of a job's data file, through this process's configured store."""
    return store_for(get_settings()).local_data(recorded)


class SharedFolderStore:
    """Models in a folder every machine mounts; the address is the path where it was stored."""

    def __init__(self, artifact_dir: Path) -> None:
        self.artifact_dir = Path(artifact_dir)

    def publish(self, stored: StoredModel) -> str:
        return str(stored.path)

    def local_model(self, address: str, sha256: str) -> Path:
        """The recorded path, or the same model under this machine's mount of the folder."""
        here = model_folder(self.artifact_dir, sha256) / graph_name(address)
        for candidate in (Path(address), here):
            if candidate.is_file():
                verify_stored(candidate, sha256)
                return candidate
        raise ModelRejected(
            f"The stored model file is missing ({address}).",
            hint="Upload the model again, or mount the shared artifact folder on this worker "
            "(OPTISTUDIO_DATA_DIR).",
        )

    def publish_data(self, path: Path) -> None:
        return None

    def local_data(self, recorded: str) -> Path:
        """The recorded path, or the same content-addressed file under this machine's mount
        (when neither exists, the recorded path: reading it then says what is missing)."""
        here = self.artifact_dir / DATA_FOLDER / Path(recorded).name
        return here if not Path(recorded).exists() and here.is_file() else Path(recorded)


class S3Store:
    """Models in an S3-compatible bucket, cached by hash in the local artifact folder."""

    def __init__(self, url: str, *, cache_dir: Path, endpoint_url: str | None = None) -> None:
        self.bucket, self.prefix = parse_s3_url(url)
        self.cache_dir = Path(cache_dir)
        self.endpoint_url = endpoint_url
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = _s3_client(self.endpoint_url)
        return self._client

    def key_of(self, sha256: str, relative: str) -> str:
        return "/".join(filter(None, [self.prefix, "models", sha256[:2], sha256, relative]))

    def publish(self, stored: StoredModel) -> str:
        """Upload the model's folder unless the bucket has it; the graph (model.onnx, or an
        IR's model.xml) goes last."""
        sha256, graph = stored.info.sha256, stored.path.name
        folder = stored.path.parent
        files = sorted(_files_of(folder), key=lambda path: path.name == graph)
        with _s3_errors("upload the model to"):
            if not self._exists(self.key_of(sha256, graph)):
                for path in files:
                    key = self.key_of(sha256, path.relative_to(folder).as_posix())
                    self.client.upload_file(str(path), self.bucket, key)
        return f"{S3_SCHEME}{self.bucket}/{self.key_of(sha256, graph)}"

    def local_model(self, address: str, sha256: str) -> Path:
        """The cached copy, or the model's folder downloaded, checked and moved into the cache."""
        target, graph = model_folder(self.cache_dir, sha256), graph_name(address)
        if (target / graph).is_file():
            verify_stored(target / graph, sha256)
            return target / graph
        if not address.startswith(S3_SCHEME):
            return SharedFolderStore(self.cache_dir).local_model(address, sha256)
        bucket, key = parse_s3_url(address)
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{sha256[:12]}."))
        try:
            self._download_folder(bucket, str(PurePosixPath(key).parent), scratch, graph)
            _check_download(scratch / graph, sha256, address)
            _move_into_place(scratch, target, graph)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        verify_stored(target / graph, sha256)  # whichever copy won the race
        return target / graph

    def publish_data(self, path: Path) -> None:
        key = "/".join(filter(None, [self.prefix, DATA_FOLDER, path.name]))
        with _s3_errors("upload the data file to"):
            if not self._exists(key):
                self.client.upload_file(str(path), self.bucket, key)

    def local_data(self, recorded: str) -> Path:
        """The file itself when this machine has it, else its cached or downloaded copy."""
        name = Path(recorded).name
        cached = self.cache_dir / DATA_FOLDER / name
        if Path(recorded).exists() or cached.is_file() or not _SHA_NAME.fullmatch(name):
            return cached if cached.is_file() else Path(recorded)
        key = "/".join(filter(None, [self.prefix, DATA_FOLDER, name]))
        cached.parent.mkdir(parents=True, exist_ok=True)
        handle, temp = tempfile.mkstemp(dir=cached.parent, prefix=f".{name}.")
        os.close(handle)
        try:
            with _s3_errors("download the data file from"):
                self.client.download_file(self.bucket, key, temp)
            _check_hash(Path(temp), Path(name).stem, f"s3://{self.bucket}/{key}")
            os.replace(temp, cached)
        finally:
            Path(temp).unlink(missing_ok=True)
        return cached

    def _exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    def _download_folder(
        self, bucket: str, folder_key: str, into: Path, graph: str = MODEL_FILE
    ) -> None:
        with _s3_errors("download the model from"):
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=bucket, Prefix=f"{folder_key}/"
            )
            keys = [item["Key"] for page in pages for item in page.get("Contents", [])]
            for key in keys:
                relative = PurePosixPath(key).relative_to(folder_key)
                local = into.joinpath(*relative.parts)
                if not local.resolve().is_relative_to(into.resolve()):
                    continue  # a key like a/../../x never leaves the scratch folder
                local.parent.mkdir(parents=True, exist_ok=True)
                self.client.download_file(bucket, key, str(local))
        if not (into / graph).is_file():
            raise ModelRejected(
                f"The model is missing from the artifact store (s3://{bucket}/{folder_key}/).",
                hint="Upload the model again.",
            )


def parse_s3_url(url: str) -> tuple[str, str]:
    """('bucket', 'prefix/without/slashes') from s3://bucket/prefix; ValueError if malformed."""
    if not url.startswith(S3_SCHEME):
        raise ValueError(f"{url!r} is not an s3:// URL (expected s3://bucket/prefix)")
    bucket, _, prefix = url.removeprefix(S3_SCHEME).partition("/")
    if not bucket:
        raise ValueError(f"{url!r} names no bucket (expected s3://bucket/prefix)")
    return bucket, prefix.strip("/")


@lru_cache(maxsize=4)
def _s3_client(endpoint_url: str | None) -> Any:
    """One client per endpoint and process (boto3 clients are thread-safe; making one is slow)."""
    try:
        import boto3
    except ImportError:
        raise ArtifactStoreError(
            "The S3 artifact store needs boto3, which is not installed.",
            hint="pip install 'optistudio[s3]', or unset OPTISTUDIO_ARTIFACT_STORE.",
        ) from None
    return boto3.client("s3", endpoint_url=endpoint_url)


@contextmanager
def _s3_errors(doing: str) -> Iterator[None]:
    """Turns boto errors into ArtifactStoreError naming the step (never the credentials)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except (ClientError, BotoCoreError) as exc:
        raise ArtifactStoreError(
            f"Could not {doing} the artifact store: {_brief(exc)}",
            hint="Check OPTISTUDIO_ARTIFACT_STORE, OPTISTUDIO_S3_ENDPOINT_URL and the AWS_* "
            "credentials of this process.",
        ) from None


def _brief(exc: BaseException) -> str:
    error = getattr(exc, "response", {}).get("Error", {})
    if error:
        return f"{error.get('Code', '?')} {error.get('Message', '')}".strip()
    return type(exc).__name__


def _files_of(folder: Path) -> list[Path]:
    """Files of a stored model's folder, skipping the temp files of a copy in progress."""
    return [p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")]


def _check_hash(path: Path, sha256: str, address: str) -> None:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(_CHUNK):
            digest.update(chunk)
    if digest.hexdigest() != sha256:
        raise ModelRejected(
            f"The copy of the model downloaded from {address} does not match its SHA-256.",
            hint="The stored object was changed or damaged; upload the model again.",
        )


def _check_download(graph: Path, sha256: str, address: str) -> None:
    """The downloaded model verifies, else one sentence naming where it came from."""
    try:
        verify_stored(graph, sha256)
    except ModelRejected as exc:
        raise ModelRejected(
            f"The copy of the model downloaded from {address} does not match its SHA-256.",
            hint=exc.hint,
        ) from None


def _move_into_place(scratch: Path, target: Path, graph: str = MODEL_FILE) -> None:
    """Rename the downloaded folder into the cache; another process may have won the race."""
    try:
        os.rename(scratch, target)
    except OSError:
        if not (target / graph).is_file():
            raise
