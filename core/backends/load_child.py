"""The child process of the isolated load check: a script of the standard library and ONNX
Runtime alone, run as `python -P -c SOURCE MEMORY PATH` (`isolated_load`).

It imports ONNX Runtime, caps its own address space at MEMORY bytes (RLIMIT_AS, where the
platform has it), makes the reference CPU session of PATH and prints one answer line: after
`ANSWER`, the JSON object `{}` (it loaded), `{"error": message}` (ONNX Runtime's refusal) or
`{"memory": true}` (an allocation failed).

Why a script and not `-m`: importing this package pulls in numpy's users and pydantic before
ONNX Runtime, 0.8 s a child instead of 0.33 s here. Its session options are the reference
session's (`reference.reference_session(path, threads=1, spin_wait=False, quiet=True)`: graph
unoptimized, one thread, no spinning, errors only); a test holds the two equal. `-P` keeps the
caller's working folder off the child's import path (a stray onnxruntime.py there).
"""

from __future__ import annotations

import json
import sys
from typing import Any

ANSWER = "optistudio-load-check:"
OUT_OF_MEMORY = ("std::bad_alloc", "MemoryError", "Failed to allocate", "Cannot allocate memory")
"""What ONNX Runtime or Python says when an allocation failed (RLIMIT_AS, or the machine)."""


def session_options(ort: Any) -> Any:
    """The reference session's options for a load check (ONNX Runtime module `ort`)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3
    return options


def load_under_limit(memory: int, path: str) -> dict[str, object]:
    """Load `path` on ONNX Runtime's CPU provider under `memory` bytes of address space."""
    import onnxruntime as ort  # before the limit: the import is ours, the file is not

    _limit_memory(memory)
    try:
        ort.InferenceSession(path, session_options(ort), providers=["CPUExecutionProvider"])
    except MemoryError:
        return {"memory": True}
    except Exception as exc:  # ONNX Runtime raises its own untyped errors
        message = str(exc)
        return {"memory": True} if any(s in message for s in OUT_OF_MEMORY) else {"error": message}
    return {}


def _limit_memory(memory: int) -> None:
    try:
        import resource  # Unix only: elsewhere the time limit alone holds
    except ImportError:
        return
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))


if __name__ == "__main__":
    print(ANSWER + json.dumps(load_under_limit(int(sys.argv[1]), sys.argv[2])), flush=True)
