"""LiteRT (TensorFlow Lite) backend: .tflite files on Google's `ai-edge-litert` interpreter.

The interpreter runs on the CPU with the XNNPACK delegate (applied by default to float and int8
graphs) and `threads` worker threads. An .onnx file is converted first (FP32, through
`optistudio.core.backends.litert_convert`, cached by content), so `bench --backend litert` takes
the same models as every other backend; the optimize step makes the FP16 and INT8 files.

Surprises worth knowing:
- The precision of a run is the precision the file is stored in, as on ONNX Runtime: 'fp32'
  and 'int8' run the file as it is ('int8' is meant for a quantized .tflite).
- A new input shape needs `resize_tensor_input` and a fresh `allocate_tensors`; we do both when
  the feeds' shapes change, so one session serves batch 1 and batch 4 in turn.
- The interpreter has no per-operator timing in its Python API (the C++ profiler is not exposed
  by ai-edge-litert), so `optistudio operator-profile` cannot break a LiteRT run down by op.
- Inputs are matched by name (TensorFlow writes 'input.1' as 'input_1'); outputs come in the
  order of the converted graph, which onnx2tf keeps from the ONNX model.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from optistudio.core.backends.base import (
    Availability,
    InferenceBackend,
    LoadedModel,
    SessionOptions,
)
from optistudio.core.backends.litert_convert import (
    INSTALL_HINT,
    RUNTIME_PACKAGE,
    cached_conversion,
    converter_versions,
    missing_converter,
)
from optistudio.core.errors import (
    BackendUnavailable,
    InferenceFailed,
    InvalidSpec,
    ModelLoadError,
    OptistudioError,
    first_line,
)

PRECISIONS = ["fp32", "int8"]
NOT_ALNUM = re.compile(r"[^0-9A-Za-z]+")


def runtime_missing() -> str | None:
    """Why the LiteRT interpreter cannot be imported here, in one clause; None when it can."""
    try:
        from ai_edge_litert import interpreter  # noqa: F401
    except ImportError as exc:
        return f"{RUNTIME_PACKAGE} is not installed ({first_line(exc, limit=120)})"
    return None


class LiteRtModel(LoadedModel):
    """One interpreter; inputs resized and tensors reallocated when the feed shapes change."""

    def __init__(self, interpreter: Any, details: dict[str, Any]) -> None:
        self._interpreter = interpreter
        self._inputs = interpreter.get_input_details()
        self._outputs = interpreter.get_output_details()
        self._shapes: dict[int, tuple[int, ...]] = {
            d["index"]: tuple(int(n) for n in d["shape"]) for d in self._inputs
        }
        self.details = details

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        if self._interpreter is None:
            raise InferenceFailed("This LiteRT interpreter was closed; load the model again.")
        try:
            matched = self._matched(feeds)
            self._resize([(d, a) for d, a in matched if tuple(a.shape) != self._shapes[d["index"]]])
            for detail, array in matched:
                self._interpreter.set_tensor(detail["index"], array.astype(detail["dtype"]))
            self._interpreter.invoke()
            return [self._interpreter.get_tensor(d["index"]).copy() for d in self._outputs]
        except (InferenceFailed, InvalidSpec):
            raise
        except Exception as exc:  # the interpreter raises plain ValueError / RuntimeError
            shapes = ", ".join(f"{name}={list(array.shape)}" for name, array in feeds.items())
            raise InferenceFailed(
                f"LiteRT could not run this model on inputs {shapes}: {first_line(exc)}",
                hint="The model may need other input sizes: set them (CLI: --shape NAME=D1,D2,... "
                "or --dim NAME=N; studio: the dims of the benchmark form).",
            ) from exc

    def _matched(self, feeds: dict[str, np.ndarray]) -> list[tuple[dict[str, Any], np.ndarray]]:
        by_name = {_plain(d["name"]): d for d in self._inputs}
        if len(feeds) == 1 and len(self._inputs) == 1:
            return [(self._inputs[0], np.asarray(next(iter(feeds.values()))))]
        try:
            return [(by_name[_plain(name)], np.asarray(array)) for name, array in feeds.items()]
        except KeyError as exc:
            names = ", ".join(d["name"] for d in self._inputs)
            raise InvalidSpec(
                f"This LiteRT model has no input {exc.args[0]!r}; it has {names}."
            ) from None

    def _resize(self, changed: list[tuple[dict[str, Any], np.ndarray]]) -> None:
        if not changed:
            return
        for detail, array in changed:
            self._interpreter.resize_tensor_input(detail["index"], list(array.shape), strict=False)
            self._shapes[detail["index"]] = tuple(array.shape)
        self._interpreter.allocate_tensors()
        self._outputs = self._interpreter.get_output_details()

    def close(self) -> None:
        self._interpreter = None


class LiteRtBackend(InferenceBackend):
    name = "litert"

    def availability(self) -> Availability:
        missing = runtime_missing()
        if missing:
            return Availability(ok=False, reason=f"{missing}: {INSTALL_HINT}")
        converter = missing_converter()
        note = (
            f"runs .tflite files; {converter}, so .onnx models cannot be converted here "
            f"({INSTALL_HINT})"
            if converter
            else "XNNPACK on the CPU; .onnx models are converted with onnx2tf"
        )
        return Availability(
            ok=True,
            devices=["cpu"],
            versions=converter_versions(),
            precisions={"cpu": PRECISIONS},
            reason=note,
        )

    def load(self, model_path: Path, options: SessionOptions) -> LoadedModel:
        missing = runtime_missing()
        if missing:
            raise BackendUnavailable(f"LiteRT cannot run here: {missing}.", hint=INSTALL_HINT)
        if options.device.split(":", 1)[0] != "cpu":
            raise InvalidSpec(
                f"LiteRT runs here on the CPU only, not on {options.device!r}. Valid devices: cpu."
            )
        if options.precision not in PRECISIONS:
            raise InvalidSpec(
                f"LiteRT runs a .tflite file in the precision it is stored in, so it cannot be "
                f"asked for {options.precision!r}. Valid precisions: {', '.join(PRECISIONS)}.",
                hint="Make an FP16 or INT8 .tflite with `optistudio optimize MODEL --target "
                "litert` and run it as it is.",
            )
        tflite, converted = _tflite_of(Path(model_path), options)
        interpreter = _interpreter(tflite, options)
        details = {
            "device": "cpu",
            "delegate": "XNNPACK",
            "threads": options.threads or psutil.cpu_count(logical=False) or 1,
            "precision": options.precision,
            "converted_from_onnx": converted,
            "memory_pool": _memory_pool_note(options),
            "ignored_options": _ignored_options(options),
        }
        return LiteRtModel(interpreter, details)


def _tflite_of(path: Path, options: SessionOptions) -> tuple[Path, bool]:
    if path.suffix.lower() != ".onnx":
        return path, False
    try:
        cache = Path(options.cache_dir) if options.cache_dir else None
        return cached_conversion(path, "fp32", cache_dir=cache), True
    except BackendUnavailable:
        raise
    except OptistudioError as exc:
        raise ModelLoadError(
            f"LiteRT could not load this model: converting it from ONNX failed ({exc.message})",
            hint=exc.hint,
        ) from exc


def _interpreter(path: Path, options: SessionOptions) -> Any:
    from ai_edge_litert.interpreter import Interpreter

    try:
        interpreter = Interpreter(model_path=str(path), num_threads=options.threads or None)
        interpreter.allocate_tensors()
    except Exception as exc:  # the interpreter raises plain ValueError / RuntimeError
        raise ModelLoadError(
            f"LiteRT could not load this model: {first_line(exc)}",
            hint="Check that it is a .tflite file made for LiteRT's built-in operators.",
        ) from exc
    return interpreter


def _plain(name: str) -> str:
    return NOT_ALNUM.sub("_", name).strip("_").lower()


def _memory_pool_note(options: SessionOptions) -> str:
    if options.memory_pool_ratio is None:
        return "LiteRT's arena, sized by the interpreter"
    return (
        f"memory_pool_ratio={options.memory_pool_ratio} not applied: the LiteRT interpreter has "
        "no setting for the share of memory its arena may take"
    )


def _ignored_options(options: SessionOptions) -> dict[str, str]:
    ignored = {}
    if options.inter_op_threads:
        ignored["inter_op_threads"] = "LiteRT runs one graph on one thread pool"
    if options.performance_hint:
        ignored["performance_hint"] = "LiteRT has no performance hints"
    if options.streams:
        ignored["streams"] = "LiteRT has no streams; load one interpreter per stream"
    if not options.spin_wait:
        ignored["spin_wait"] = "LiteRT has no spin-wait setting"
    return ignored
