"""ONNX Runtime backend (CPU execution provider; other providers come with the hardware layer)."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from core.backends.base import Availability, InferenceBackend, LoadedModel, SessionOptions
from core.errors import InferenceFailed, InvalidSpec, ModelLoadError, first_line

PROVIDERS_BY_DEVICE = {"cpu": "CPUExecutionProvider"}


class OnnxRuntimeSession(LoadedModel):
    def __init__(self, session: Any, details: dict[str, Any]) -> None:
        self._session = session
        self.details = details

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        try:
            outputs: list[np.ndarray] = self._session.run(None, feeds)
        except Exception as exc:  # the runtime raises its own untyped errors
            shapes = ", ".join(f"{name}={list(array.shape)}" for name, array in feeds.items())
            raise InferenceFailed(
                f"ONNX Runtime could not run this model on inputs {shapes}: {first_line(exc)}",
                hint="The model may need other input sizes: set them (CLI: --shape NAME=D1,D2,... "
                "or --dim NAME=N; studio: the dims of the benchmark form).",
            ) from exc
        return outputs

    def close(self) -> None:
        self._session = None


class OnnxRuntimeBackend(InferenceBackend):
    name = "onnxruntime"

    def availability(self) -> Availability:
        try:
            import onnxruntime as ort
        except ImportError as exc:
            return Availability(ok=False, reason=f"onnxruntime is not installed ({exc})")
        return Availability(
            ok=True,
            devices=["cpu"],
            versions={"onnxruntime": version("onnxruntime")},
            reason=f"providers: {', '.join(ort.get_available_providers())}",
        )

    def load(self, model_path: Path, options: SessionOptions) -> LoadedModel:
        import onnxruntime as ort

        _check_precision(options.precision)
        provider = _provider_for(options.device)
        session_options = _session_options(ort, options)
        try:
            session = ort.InferenceSession(
                str(model_path), sess_options=session_options, providers=[provider]
            )
        except Exception as exc:  # the runtime raises its own untyped errors
            raise ModelLoadError(
                f"ONNX Runtime could not load this model: {first_line(exc)}",
                hint="Check that its operators and opset are supported by this ONNX Runtime "
                f"version ({ort.__version__}), or export it again with a lower opset.",
            ) from exc
        details = {
            "providers": session.get_providers(),
            "requested_provider": provider,
            # ONNX Runtime's default intra-op pool has one thread per physical core.
            "threads": options.threads or psutil.cpu_count(logical=False) or 1,
            "precision": "fp32",
            "memory_pool": _memory_pool_note(options),
            "ignored_options": _ignored_options(options),
        }
        return OnnxRuntimeSession(session, details)


def _provider_for(device: str) -> str:
    kind = device.split(":", 1)[0]
    if kind not in PROVIDERS_BY_DEVICE:
        valid = ", ".join(PROVIDERS_BY_DEVICE)
        raise InvalidSpec(f"ONNX Runtime has no device {device!r} here. Valid devices: {valid}.")
    return PROVIDERS_BY_DEVICE[kind]


def _check_precision(precision: str) -> None:
    if precision != "fp32":
        raise InvalidSpec(
            f"ONNX Runtime runs a model in the precision it is stored in, so it cannot be asked "
            f"for {precision!r}. Valid precisions: fp32.",
            hint="Benchmark an FP16 or INT8 variant of the model (made by the optimize step) "
            "with precision fp32 instead.",
        )


def _memory_pool_note(options: SessionOptions) -> str:
    if options.memory_pool_ratio is None:
        return "CPU arena on (ONNX Runtime's default)"
    return (
        f"CPU arena on; memory_pool_ratio={options.memory_pool_ratio} not applied: ONNX "
        "Runtime's CPU arena has no size limit as a share of memory (it grows as needed)"
    )


def _ignored_options(options: SessionOptions) -> dict[str, str]:
    ignored = {}
    if options.performance_hint:
        ignored["performance_hint"] = "ONNX Runtime has no performance hints"
    if options.streams:
        ignored["streams"] = "ONNX Runtime has no streams; use threads / inter_op_threads"
    if options.cache_dir:
        ignored["cache_dir"] = "the CPU execution provider compiles nothing to cache"
    return ignored


def _session_options(ort: Any, options: SessionOptions) -> Any:
    session_options = ort.SessionOptions()
    session_options.log_severity_level = 3
    session_options.enable_cpu_mem_arena = True
    if options.threads:
        session_options.intra_op_num_threads = options.threads
    if options.inter_op_threads:
        session_options.inter_op_num_threads = options.inter_op_threads
    if not options.spin_wait:
        session_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session_options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return session_options
