"""The upload's load check in a child process, under a time and a memory limit.

ONNX Runtime is native code: a hostile or broken file can make it allocate without bound, spin,
or crash. In the studio's own process that would take the studio down for everyone, so the
check that a new upload loads (`check_loads`) runs in a fresh interpreter (`load_child`) that
caps its own address space (RLIMIT_AS) before it opens the file and is killed when it outlives
its time. A refusal from ONNX Runtime comes back as its message and is read here as
`check_loads` reads it; a child that runs out of memory, crashes, is killed or is late becomes
one sentence naming the limits and the variables that raise them. Never an exception of another
kind, and the caller's process is untouched.

A subprocess, not multiprocessing: spawn and forkserver re-import the parent's `__main__`,
which in the studio is Streamlit's page script. The child costs an interpreter start and ONNX
Runtime's import, about 0.35 s here, once per upload.

The memory limit, unless one is given, is 4x the model's bytes (its file and its external data
files), at least 4 GiB and at most this machine's memory. RLIMIT_AS counts address space, which
includes the external data ONNX Runtime maps rather than reads. Where `resource` is missing
(Windows) only the time limit holds.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Protocol

import onnx
import psutil
from onnx.external_data_helper import ExternalDataInfo, uses_external_data

from optistudio.core.backends import load_child
from optistudio.core.backends.load_child import ANSWER, OUT_OF_MEMORY
from optistudio.core.backends.loadable import load_refusal
from optistudio.core.errors import ModelRejected

log = logging.getLogger(__name__)

TIME_ENV = "OPTISTUDIO_LOAD_CHECK_TIME_S"
MEMORY_ENV = "OPTISTUDIO_LOAD_CHECK_MEMORY_MB"
DEFAULT_SECONDS = 120.0
MIN_MEMORY_BYTES = 4 * 1024**3
MEMORY_PER_MODEL_BYTE = 4
_CHILD_SOURCE = Path(load_child.__file__).read_text(encoding="utf-8")


class LoadCheckLimits(Protocol):
    """The limits of a load check, as a process's settings hold them (services.settings)."""

    load_check_time_s: float
    load_check_memory_mb: int
    """0: `memory_budget`, from the model's size."""

    @property
    def max_upload_bytes(self) -> int:
        """No model intake accepts is bigger (its file and external data)."""
        ...


def isolated_check_loads(limits: LoadCheckLimits) -> Callable[[Path], None]:
    """The load check intake runs (its `load_check`), in a child process within `limits`."""
    return partial(
        check_loads_isolated,
        seconds=limits.load_check_time_s,
        memory_bytes=limits.load_check_memory_mb * 2**20 or None,
        max_model_bytes=limits.max_upload_bytes,
    )


def check_loads_isolated(
    path: Path,
    *,
    seconds: float = DEFAULT_SECONDS,
    memory_bytes: int | None = None,
    max_model_bytes: int | None = None,
) -> None:
    """Raise ModelRejected when ONNX Runtime's CPU provider cannot load `path` in a child
    process within `seconds` and `memory_bytes` (None: `memory_budget`, for a model of at most
    `max_model_bytes`); the reasons read as `check_loads`'s, and a child outside its limits is
    one sentence (`over_limits`)."""
    path = Path(path).absolute()
    memory = memory_bytes or memory_budget(path, max_model_bytes=max_model_bytes)
    command = [sys.executable, "-P", "-c", _CHILD_SOURCE, str(memory), str(path)]
    try:
        done = subprocess.run(command, capture_output=True, timeout=seconds, check=False)
    except subprocess.TimeoutExpired:  # run() has killed the child
        raise over_limits(seconds, memory, "it took longer than that") from None
    stderr = done.stderr.decode(errors="replace")
    answer = _answer(done.stdout.decode(errors="replace"))
    if answer is None:
        log.warning("load check of %s ended without an answer: %s", path.name, stderr[-2000:])
        raise over_limits(seconds, memory, _how_it_ended(done.returncode, stderr))
    if answer.get("memory"):
        raise over_limits(seconds, memory, "it ran out of memory")
    if (message := answer.get("error")) is not None:
        raise load_refusal(str(message), path)


def over_limits(seconds: float, memory: int, what: str) -> ModelRejected:
    """The refusal for a load check that ended outside its limits, `what` saying how."""
    return ModelRejected(
        f"ONNX Runtime could not load the model within {seconds:g} s and "
        f"{memory // 1024**2:,} MB: {what}.",
        hint="A file built to exhaust the server is refused this way. If the model is genuine, "
        f"check it with ONNX Runtime on your machine; to allow it, set {MEMORY_ENV} (MB) or "
        f"{TIME_ENV} (seconds) higher where the studio or the CLI runs.",
    )


def memory_budget(path: Path, *, max_model_bytes: int | None = None) -> int:
    """4x the model's bytes, at least 4 GiB, at most this machine's memory. When no model may
    pass `max_model_bytes` (the upload limit) and 4x that is under 4 GiB, the model is not
    read again: with the default 512 MB limit, every budget is 4 GiB."""
    machine = psutil.virtual_memory().total
    if max_model_bytes is not None and MEMORY_PER_MODEL_BYTE * max_model_bytes <= MIN_MEMORY_BYTES:
        return int(min(MIN_MEMORY_BYTES, machine))
    wanted = max(MIN_MEMORY_BYTES, MEMORY_PER_MODEL_BYTE * model_bytes(path))
    return int(min(wanted, machine))


def model_bytes(path: Path) -> int:
    """The file's size plus its external data files' (intake has checked they are inside)."""
    size = path.stat().st_size
    try:
        beside = [path.parent / name for name in _external_locations(path)]
        return size + sum(file.stat().st_size for file in beside if file.is_file())
    except Exception:  # protobuf's DecodeError, a malformed entry: the runtime will say what
        return size


def _external_locations(path: Path) -> set[str]:
    graph = onnx.load(str(path), load_external_data=False).graph
    return {ExternalDataInfo(t).location for t in _tensors(graph) if uses_external_data(t)}


def _tensors(root: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every stored tensor of `root` and its subgraphs, walked without recursion."""
    graphs = [root]
    while graphs:
        graph = graphs.pop()
        yield from graph.initializer
        for sparse in graph.sparse_initializer:
            yield from (sparse.values, sparse.indices)
        for attribute in (a for node in graph.node for a in node.attribute):
            yield from attribute.tensors
            yield from (attribute.t,) if attribute.HasField("t") else ()
            graphs.extend(attribute.graphs)
            graphs.extend((attribute.g,) if attribute.HasField("g") else ())


def _answer(stdout: str) -> dict[str, object] | None:
    lines = [line for line in stdout.splitlines() if line.startswith(ANSWER)]
    if not lines:
        return None
    answer = json.loads(lines[-1].removeprefix(ANSWER))
    return answer if isinstance(answer, dict) else None


def _how_it_ended(returncode: int, stderr: str) -> str:
    if any(sign in stderr for sign in OUT_OF_MEMORY):
        return "it ran out of memory"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"its process was stopped by {name}"
    return f"its process exited with status {returncode} and no answer"
