"""The reference ONNX Runtime session: the model on the CPU, as written, that others are
checked against (calibration, layer errors, fusion checks), and the CPU session offline
optimization and operator profiling use.

ONNX Runtime is imported only when a session is made. Its errors are its own untyped ones;
each caller turns them into the error that says what it was doing.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import onnxruntime as ort

Optimization = Literal["disabled", "basic", "extended", "all"]
"""ONNX Runtime's graph optimization levels; "disabled" keeps every node and tensor name."""

_LEVELS = {
    "disabled": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}
_QUIET = 3
"""ONNX Runtime's log severity for errors only."""


def reference_session(
    model: Path,
    *,
    optimization: Optimization = "disabled",
    threads: int | None = None,
    spin_wait: bool = True,
    quiet: bool = False,
    profile_prefix: Path | None = None,
    optimized_model: Path | None = None,
) -> ort.InferenceSession:
    """An ONNX Runtime session of `model` on the CPU execution provider.

    By default the graph runs unoptimized (every intermediate tensor keeps its name) with the
    runtime's own threads. `spin_wait=False` stops idle threads spinning; `quiet` logs errors
    only; `profile_prefix` turns ONNX Runtime's profiler on (its JSON file starts with that
    path); `optimized_model` saves the graph as optimized at `optimization`.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _LEVELS[optimization])
    if threads:
        options.intra_op_num_threads = threads
    if not spin_wait:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if quiet:
        options.log_severity_level = _QUIET
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = str(profile_prefix)
    if optimized_model is not None:
        options.optimized_model_filepath = str(optimized_model)
    return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
