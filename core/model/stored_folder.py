"""A checked model put into its content-addressed folder, as exactly the files that were checked.

The graph is written as `model.onnx` and each external data file under the relative name the
graph gives it (intake refuses names that leave the folder, start with "." or collide with
`model.onnx`). Everything is copied into a fresh staging folder in the store and hashed while
it is copied (content_address); intake runs its checks on that copy, and only then is the
staging folder renamed into place, in one step. Nothing already in the store stands for the
checked files: an existing folder is kept only when it verifies against the address, else it is
set aside and replaced. Concurrent stores of one model are safe: the loser of the rename finds a
folder that verifies and drops its copy.

An OpenVINO IR made by the studio's passes takes the same path (`staged_ir_copy`): its .xml
and .bin copied as model.xml and model.bin while they are hashed (content_address.ir_address),
checked on that copy, then renamed into place (`place_staged(..., name=IR_STORED_NAME)`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from optistudio.core.errors import ArtifactStoreError, ModelRejected
from optistudio.core.model.content_address import (
    content_address,
    ir_address,
    ir_files,
    verify_stored,
)

STORED_NAME = "model.onnx"
"""The name every stored ONNX graph is kept under."""
IR_STORED_NAME = "model.xml"
"""The name a stored OpenVINO IR's graph is kept under (its weights: model.bin)."""
_CHUNK = 1024**2
_ATTEMPTS = 3


@contextmanager
def staged_copy(source: Path, locations: list[str], root: Path) -> Iterator[tuple[Path, str]]:
    """A copy of `source` (as model.onnx) and its external data at `locations` in a staging
    folder under `root`, with its address; the staging folder is gone afterwards (renamed into
    place, or removed)."""
    with _staging(root) as staging:
        graph = _copy_hashing(source, staging / STORED_NAME)
        external = [
            (name, _copy_hashing(source.parent / name, staging / name)) for name in locations
        ]
        yield staging / STORED_NAME, content_address(graph, external)


@contextmanager
def staged_ir_copy(source: Path, root: Path) -> Iterator[tuple[Path, str]]:
    """A copy of the IR `source` (.xml, its .bin beside it) as model.xml and model.bin in a
    staging folder under `root`, with its address (content_address.ir_address)."""
    with _staging(root) as staging:
        copies = ir_files(staging / IR_STORED_NAME)
        named = [
            (copy.name, _copy_hashing(original, copy))
            for original, copy in zip(ir_files(source), copies, strict=True)
        ]
        yield copies[0], ir_address(named)


@contextmanager
def _staging(root: Path) -> Iterator[Path]:
    """A new staging folder under `root`, removed afterwards; when the caller's block fails,
    the folders made for it go too."""
    made = _missing_folders(root)
    staging = _staging_folder(root)
    done = False
    try:
        yield staging
        done = True
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if not done:  # a refused model leaves no trace, not even the folders made for it
            _remove_empty(made)


def _missing_folders(folder: Path) -> list[Path]:
    """`folder` and its parents that do not exist yet, deepest first."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def _staging_folder(root: Path) -> Path:
    """A new hidden folder in `root`, made if need be (again if a refused store removed it)."""
    for _ in range(_ATTEMPTS):
        root.mkdir(parents=True, exist_ok=True)
        with suppress(FileNotFoundError):
            return Path(tempfile.mkdtemp(dir=root, prefix=".staging."))
    raise ArtifactStoreError(
        "The artifact store's models folder could not be written to.",
        hint="Check that the artifact folder is writable, then upload the model again.",
    )


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # not empty: another store is using it
            return


def place_staged(
    staging: Path, folder: Path, sha256: str, *, name: str = STORED_NAME
) -> tuple[Path, bool]:
    """Rename the staging folder (whose files hash to `sha256`) to `folder`; its graph (`name`:
    model.onnx, or an IR's model.xml) and whether this call put it there (False: a folder that
    verifies was there already)."""
    target = folder / name
    if _verifies(target, sha256):
        return target, False
    folder.parent.mkdir(parents=True, exist_ok=True)
    return target, _swap_in(staging, target, sha256)


def _verifies(target: Path, sha256: str) -> bool:
    if not target.is_file():
        return False
    try:
        verify_stored(target, sha256)
    except ModelRejected:
        return False
    return True


def _copy_hashing(source: Path, target: Path) -> str:
    """Copy `source` to a new file `target` (fsynced); the SHA-256 of the bytes written."""
    digest = hashlib.sha256()
    target.parent.mkdir(parents=True, exist_ok=True)
    with source.open("rb") as src, target.open("xb") as out:
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    return digest.hexdigest()


def _swap_in(staging: Path, target: Path, sha256: str) -> bool:
    """Rename `staging` to the folder of `target` (True); a folder already there stays if its
    `target` verifies (False), else it is set aside first (another store may be doing the same:
    a few attempts)."""
    folder = target.parent
    for _ in range(_ATTEMPTS):
        try:
            os.rename(staging, folder)
            return True
        except OSError:
            pass
        if _verifies(target, sha256):
            return False
        _set_aside(folder, sha256)
    raise ArtifactStoreError(
        "The model's folder in the artifact store could not be replaced by the checked copy.",
        hint="Check that the artifact folder is writable, then upload the model again.",
    )


def _set_aside(folder: Path, sha256: str) -> None:
    """Move a folder that does not verify out of the way and delete it."""
    stale = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{sha256[:12]}.stale."))
    try:
        os.rename(folder, stale / "old")
    except FileNotFoundError:
        pass  # another store set it aside first
    finally:
        shutil.rmtree(stale, ignore_errors=True)
