"""Putting models into the catalogue: content-addressed artifact plus one database row.

Shared by the studio (uploads, samples, models on the workers' shared storage) and the CLI
(`bench --save`, `models add`), so a model stored either way is the same model. The upload
limit (OPTISTUDIO_MAX_UPLOAD_MB) bounds what a browser sends (`add_upload`); a file already on
this machine or its shared storage is bounded by the machine only (declared sizes, node count,
the isolated load check's memory, which grows with the model).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

from sqlalchemy.orm import Session, sessionmaker

from optistudio.core.backends.isolated_load import check_loads_isolated
from optistudio.core.errors import InvalidSpec, ModelRejected
from optistudio.core.llm.configs import CONFIG_FILES
from optistudio.core.llm.folder import TOKENIZER_FILES, decoder_path, is_decoder_file
from optistudio.core.llm.genai_config import GENAI_CONFIG, renamed_config
from optistudio.core.model.info import ModelInfo
from optistudio.core.model.intake import store_model
from optistudio.core.model.samples import build_sample
from optistudio.db.queries import get_or_create_model, set_input_profile
from optistudio.db.session import transaction
from optistudio.services.artifact_store import MODEL_FILE, store_for
from optistudio.services.input_profiles import proposed_profile
from optistudio.services.model_roots import storage_model
from optistudio.services.settings import Settings
from optistudio.services.upload_archive import unpack_folder, upload_name


@dataclass(frozen=True)
class CatalogEntry:
    model_id: int
    created: bool
    name: str
    path: Path
    info: ModelInfo


def add_model_file(
    factory: sessionmaker[Session],
    settings: Settings,
    source: Path,
    *,
    name: str,
    origin: str = "upload",
    parent_id: int | None = None,
    recipe: dict[str, Any] | None = None,
    precision: str = "fp32",
    max_bytes: int | None = None,
) -> CatalogEntry:
    """Validate and store `source`, then record it; the same bytes twice give one model.

    Variants name their `parent_id` and the `recipe` that made them from it. The row records the
    model's address in the artifact store (a shared-folder path or an s3:// URL). A model from
    outside must load in ONNX Runtime; a variant was made here and loaded by its own backend to be
    timed, which may be the only one it is meant for (TensorRT, OpenVINO). `max_bytes`: the
    upload limit when `source` came from a browser; None for a file already on this machine."""
    stored = store_model(
        source,
        artifact_dir=settings.artifact_dir,
        max_bytes=max_bytes,
        max_tensor_bytes=settings.max_tensor_bytes,
        load_check=None if origin == "variant" else _load_check(settings, max_bytes),
    )
    beside = any((source.parent / name).is_file() for name in SIDE_FILES)
    if stored.created and beside and is_decoder_file(stored.path):  # before publishing: a
        _copy_side_files(source.parent, stored.path.parent)  # bucket gets the whole folder
    address = store_for(settings).publish(stored)
    with transaction(factory) as s:
        model, created = get_or_create_model(
            s,
            sha256=stored.info.sha256,
            name=name,
            filename=source.name,
            path=address,
            size_bytes=stored.info.size_bytes,
            info=stored.info.model_dump(mode="json"),
            source=origin,
            parent_id=parent_id,
            recipe=recipe,
            precision=precision,
        )
        if created and origin != "variant":  # variants are fed like their original
            sample = name if origin == "sample" else None
            profile = proposed_profile(stored.info, sample=sample)
            set_input_profile(s, model_id=model.id, profile=profile.model_dump(mode="json"))
        model_id = model.id
    return CatalogEntry(model_id, created, name, stored.path, stored.info)


def add_upload(
    factory: sessionmaker[Session], settings: Settings, stream: BinaryIO, *, filename: str
) -> CatalogEntry:
    """Store an uploaded stream (copied in chunks to a scratch file first): an .onnx file, or
    a .zip of a model's folder (a decoder with its genai_config.json / config.json and
    tokenizer files, or a graph with its external data). An odd name or archive is refused in
    one sentence (upload_archive) and leaves nothing in the scratch folder."""
    scratch_root = settings.data_dir / "incoming"
    scratch_root.mkdir(parents=True, exist_ok=True)
    name = upload_name(filename)
    with tempfile.TemporaryDirectory(dir=scratch_root) as scratch:
        target = Path(scratch) / name
        _copy_bounded(stream, target, settings.max_upload_bytes)
        if target.suffix.lower() == ".zip":
            target = _model_in_zip(target, Path(scratch) / "folder", settings.max_upload_bytes)
        return add_model_file(
            factory, settings, target, name=Path(name).stem, max_bytes=settings.max_upload_bytes
        )


def add_from_storage(
    factory: sessionmaker[Session], settings: Settings, given: str, *, name: str | None = None
) -> CatalogEntry:
    """Store the model at `given` (an .onnx file or a model's folder) that already lies under
    one of the operator's model roots (model_roots: one sentence for any path outside, or
    with the feature off), checked and copied as an upload is, with no upload limit."""
    graph = storage_model(settings, given)
    label = name or (graph.parent.name if graph.name == MODEL_FILE else graph.stem)
    return add_model_file(factory, settings, graph, name=label, origin="storage")


def _load_check(settings: Settings, max_bytes: int | None) -> Callable[[Path], None]:
    """ONNX Runtime's load check in a child process within the settings' time and memory
    (memory from the model's size unless set; an upload's limit lets a small one skip reading)."""
    return partial(
        check_loads_isolated,
        seconds=settings.load_check_time_s,
        memory_bytes=settings.load_check_memory_mb * 2**20 or None,
        max_model_bytes=max_bytes,
    )


def _model_in_zip(archive: Path, folder: Path, max_bytes: int) -> Path:
    """Unpack a model's folder (bounded, nothing outside `folder`: upload_archive) and find
    its graph."""
    unpack_folder(archive, folder, max_bytes)
    entries = list(folder.iterdir())
    root = entries[0] if len(entries) == 1 and entries[0].is_dir() else folder
    try:
        return decoder_path(root)
    except InvalidSpec as exc:
        raise ModelRejected(
            exc.message, hint="Zip one model's folder, with every file its configs name inside it."
        ) from None


def _copy_side_files(source: Path, stored: Path) -> None:
    """A decoder's configs and tokenizer, beside the graph this upload stored (where jobs and
    the bundle read them, optistudio.core.llm.folder). Only into a folder the upload wrote: a
    later upload of the same graph never adds to, or changes, another's model. An existing
    file (an external data file of that name) is kept; genai_config.json names the stored graph
    (model.onnx) in place of the uploaded file's name."""
    for name in SIDE_FILES:
        if (source / name).is_file() and not (stored / name).exists():
            temp = stored / f".{name}.{os.getpid()}.tmp"
            renamed = renamed_config(source / name, MODEL_FILE) if name == GENAI_CONFIG else None
            if renamed is None:
                shutil.copyfile(source / name, temp)
            else:
                temp.write_text(renamed)
            os.replace(temp, stored / name)


def add_sample(factory: sessionmaker[Session], settings: Settings, sample: str) -> CatalogEntry:
    """Build a sample model in code (or copy a packaged one) and store it."""
    scratch_root = settings.data_dir / "incoming"
    scratch_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch_root) as scratch:
        path = build_sample(sample, Path(scratch))
        return add_model_file(factory, settings, path, name=sample, origin="sample")


def _copy_bounded(stream: BinaryIO, target: Path, max_bytes: int) -> None:
    """Copy in 1 MiB chunks, refusing as soon as the stream passes the upload limit."""
    written = 0
    with target.open("wb") as out:
        while chunk := stream.read(1024 * 1024):
            written += len(chunk)
            if written > max_bytes:
                raise ModelRejected(
                    f"The file is larger than the upload limit of {max_bytes // 2**20} MiB.",
                    hint="Raise OPTISTUDIO_MAX_UPLOAD_MB if this model is expected to be this big.",
                )
            out.write(chunk)


def store_dataset(settings: Settings, stream: BinaryIO, *, filename: str) -> Path:
    """Keep an uploaded calibration/accuracy file (.npz, .npy, .csv) or video clip
    content-addressed."""
    suffix = Path(filename).suffix.lower()
    if suffix not in DATASET_SUFFIXES:
        raise ModelRejected(
            f"{filename!r} is not a supported data file.",
            hint=f"Use one of: {', '.join(sorted(DATASET_SUFFIXES))}.",
        )
    folder = settings.artifact_dir / "datasets"
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        target = Path(scratch) / f"upload{suffix}"
        _copy_bounded(stream, target, settings.max_upload_bytes)
        digest = hashlib.sha256(target.read_bytes()).hexdigest()
        final = folder / f"{digest}{suffix}"
        if not final.exists():
            os.replace(target, final)
    store_for(settings).publish_data(final)
    return final


SIDE_FILES = (*CONFIG_FILES, *TOKENIZER_FILES, "generation_config.json")
"""The files beside a decoder that its tokenizer and configs are read from."""
VIDEO_SUFFIXES = {".mp4", ".mkv", ".avi", ".webm", ".mov"}
"""Clips the video job plays, stored like datasets."""
DATASET_SUFFIXES = {".npz", ".zip", ".npy", ".csv", ".txt", ".json", *VIDEO_SUFFIXES}
