"""A stored model's content address: the SHA-256 of its graph together with its external data.

A graph without external data is addressed by the SHA-256 of its file, as it always was, so
models stored before external data counted keep their address. A graph with external data is
addressed by the SHA-256 of one compact JSON document (json.dumps: sorted keys, no spaces,
non-ASCII escaped):

    {"external": [["<name>", "<sha256 of that file>"], ...], "graph": "<sha256 of the graph>"}

with every external data file the graph names, by its relative name, sorted by name. Two graphs
with the same bytes and other weights, or the same weights under other names, get different
addresses; and since that document is never an ONNX file, no graph alone hashes to it.

An OpenVINO IR (a variant the studio's passes made: NNCF's INT8 on the OpenVINO model) is its
.xml and its .bin together, stored as model.xml and model.bin, addressed by the SHA-256 of

    {"openvino_ir": [["model.bin", "<sha256>"], ["model.xml", "<sha256>"]]}

(the same json.dumps), so neither file alone, nor an ONNX graph's document, hashes to it.

`verify_stored` checks a stored model (model.onnx, or an IR's model.xml) against the address recorded for it, before anyone
reads it. A model stored before this rule with external data was addressed by its graph alone:
its graph still verifies, its weights are not covered (upload it again to cover them). A check
that passed is remembered in this process until the files' inode, size, mtime or ctime change
(a rewrite changes ctime even when it restores mtime), so a worker hashes a big file once,
not on every job step.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx.external_data_helper import ExternalDataInfo, uses_external_data

from optistudio.core.errors import ModelRejected
from optistudio.core.model.contained import contained
from optistudio.core.model.declared_sizes import model_tensors

_CHUNK = 1024**2
_CACHE_SIZE = 512
_State = tuple[int, int, int, int, int]
_verified: OrderedDict[tuple[str, str], tuple[tuple[Path, ...], tuple[_State, ...]]] = OrderedDict()
_lock = threading.Lock()
MISMATCH_HINT = "The stored copy was changed or damaged; upload the model again."
IR_SUFFIX = ".xml"
"""How a stored OpenVINO IR's graph file ends; its weights are the .bin of the same stem."""
IR_KEY = "openvino_ir"


def content_address(graph_sha256: str, external: Iterable[tuple[str, str]]) -> str:
    """The address of a graph (its file's SHA-256) with its external files (name, SHA-256)."""
    files = sorted(external)
    if not files:
        return graph_sha256
    document = {"external": [list(pair) for pair in files], "graph": graph_sha256}
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def ir_address(files: Iterable[tuple[str, str]]) -> str:
    """The address of an OpenVINO IR: its .xml and .bin as (stored name, SHA-256) pairs."""
    document = {IR_KEY: [list(pair) for pair in sorted(files)]}
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def ir_files(graph: Path) -> tuple[Path, Path]:
    """An IR's two files: the .xml and the .bin beside it (same stem)."""
    return Path(graph), Path(graph).with_suffix(".bin")


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as file:
        while chunk := file.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def address_of(graph: Path, locations: Iterable[str]) -> str:
    """The address of the graph file with the external files at `locations` beside it."""
    folder = Path(graph).parent
    return content_address(
        file_sha256(graph), [(name, file_sha256(folder / name)) for name in locations]
    )


def external_locations(model: onnx.ModelProto) -> list[str]:
    """The external data locations a parsed graph names (unchecked), sorted, each once."""
    return sorted(
        {ExternalDataInfo(t).location for t in model_tensors(model) if uses_external_data(t)}
    )


def verify_stored(graph: Path, sha256: str) -> None:
    """ModelRejected, in one sentence, unless the stored graph and the external files it names
    hash to the recorded `sha256` (module docstring), or, for an IR's .xml, unless the .xml and
    its .bin do; a passed check is cached per file state."""
    key = (str(Path(graph).absolute()), sha256)
    with _lock:
        known = _verified.get(key)
    if known is not None and _states(known[0]) == known[1]:
        return
    files, states = _check(Path(graph), sha256)
    with _lock:
        _verified[key] = (files, states)
        _verified.move_to_end(key)
        while len(_verified) > _CACHE_SIZE:
            _verified.popitem(last=False)


def _check(graph: Path, sha256: str) -> tuple[tuple[Path, ...], tuple[_State, ...]]:
    """The files that make the model (graph first) and their states as they were hashed, once
    they hash to `sha256`."""
    if graph.suffix == IR_SUFFIX:
        return _check_ir(graph, sha256)
    graph_sha, graph_state = _hashed(graph)
    if graph_sha == sha256:  # no external data, or an address from before they counted
        return (graph,), (graph_state,)
    locations = _stored_locations(graph)
    if not locations or not all(_inside_file(graph.parent, name) for name in locations):
        raise _mismatch()
    hashed = [_hashed(graph.parent / name) for name in locations]
    external = [(name, digest) for name, (digest, _) in zip(locations, hashed, strict=True)]
    if content_address(graph_sha, external) != sha256:
        raise _mismatch()
    files = (graph, *(graph.parent / name for name in locations))
    return files, (graph_state, *(state for _, state in hashed))


def _check_ir(graph: Path, sha256: str) -> tuple[tuple[Path, ...], tuple[_State, ...]]:
    """An IR's .xml and .bin and their states, once the two hash to `sha256`."""
    files = ir_files(graph)
    hashed = [_hashed(path) for path in files]
    named = [(path.name, digest) for path, (digest, _) in zip(files, hashed, strict=True)]
    if ir_address(named) != sha256:
        raise _mismatch()
    return files, tuple(state for _, state in hashed)


def _hashed(path: Path) -> tuple[str, _State]:
    """The file's SHA-256 and its state taken before reading (a later write changes ctime)."""
    digest = hashlib.sha256()
    try:
        with path.open("rb") as file:
            state = _state(os.fstat(file.fileno()))
            while chunk := file.read(_CHUNK):
                digest.update(chunk)
    except OSError:
        raise _mismatch() from None
    return digest.hexdigest(), state


def _stored_locations(graph: Path) -> list[str]:
    try:
        return external_locations(onnx.load(str(graph), load_external_data=False))
    except (DecodeError, ValueError, OSError):
        raise _mismatch() from None


def _inside_file(folder: Path, name: str) -> bool:
    """Whether `name` is a file that stays inside `folder` (links followed)."""
    path = contained(folder, name)
    return path is not None and path.is_file()


def _mismatch() -> ModelRejected:
    return ModelRejected(
        "The stored model's files do not match the hash recorded when it was checked, so "
        "they are not used.",
        hint=MISMATCH_HINT,
    )


def _states(files: tuple[Path, ...]) -> tuple[_State, ...]:
    """Each file's state now; () when one is gone."""
    try:
        return tuple(_state(os.stat(path)) for path in files)
    except OSError:
        return ()


def _state(stat: os.stat_result) -> _State:
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
