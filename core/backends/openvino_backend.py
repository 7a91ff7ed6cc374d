"""OpenVINO backend: the model is compiled natively for an Intel/x86 CPU (or Intel GPU/NPU).

Surprises worth knowing:
- On a CPU with BF16 support OpenVINO's default inference precision is bf16, not f32. We always
  send INFERENCE_PRECISION_HINT, so 'fp32' means f32 and results compare with ONNX Runtime.
- An f16 hint on a CPU without FP16 is silently run in bf16 by OpenVINO; we refuse it up front
  and, for anything that still slips, compare the compiled model's precision with the request
  and record the fallback in `details['fallback']`.
- 'int8' is not a conversion: a QDQ / NNCF-quantized model runs its quantized layers in int8 and
  the rest in f32. `details['layer_precisions']` counts what the compiled layers really use.
- Dynamic dims stay dynamic: concrete feeds of any batch size run without a reshape. A graph
  whose dynamic form does not compile ("Squeeze operation with dynamic rank") is compiled
  reshaped to each run's input shapes instead (optistudio.core.backends.openvino_static), as is
  an IR the ov_static pass fixed at its run's shapes, at any other shapes it is fed.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from optistudio.core.backends.base import (
    Availability,
    InferenceBackend,
    LoadedModel,
    SessionOptions,
)
from optistudio.core.backends.openvino_static import SPECIALIZED, ReshapedOpenVinoModel
from optistudio.core.errors import BackendUnavailable, InferenceFailed, InvalidSpec, ModelLoadError

logger = logging.getLogger(__name__)

DEVICE_KINDS = {"cpu": "CPU", "gpu": "GPU", "npu": "NPU"}
PRECISION_HINTS = {"fp32": "f32", "bf16": "bf16", "fp16": "f16", "int8": "f32"}
"""Our precision -> INFERENCE_PRECISION_HINT. int8 layers come from the model; the rest is f32."""
CAPABILITY_OF = {"fp32": "FP32", "bf16": "BF16", "fp16": "FP16", "int8": "INT8"}
"""Our precision -> the OPTIMIZATION_CAPABILITIES entry a device needs for it."""
PRECISION_NAMES = {"f32": "fp32", "bf16": "bf16", "f16": "fp16"}
BOOKKEEPING_LAYERS = {"Input", "Output", "Const"}
NOISE_LINE = re.compile(r"^(Exception from |Check '.*' failed at )")


class OpenVinoModel(LoadedModel):
    """A compiled model and one synchronous InferRequest."""

    def __init__(self, compiled: Any, details: dict[str, Any]) -> None:
        self._compiled = compiled
        self._request = compiled.create_infer_request()
        self._outputs = list(compiled.outputs)
        self.details = details

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        if self._request is None:
            raise InferenceFailed("This OpenVINO model was closed; load it again to run it.")
        try:
            results = self._request.infer(feeds)
        except Exception as exc:  # the runtime raises its own untyped errors
            shapes = ", ".join(f"{name}={list(array.shape)}" for name, array in feeds.items())
            raise InferenceFailed(
                f"OpenVINO could not run this model on inputs {shapes}: {runtime_message(exc)}",
                hint="The model may need other input sizes: set them (CLI: --shape NAME=D1,D2,... "
                "or --dim NAME=N; studio: the dims of the benchmark form).",
            ) from exc
        return [np.asarray(results[output]) for output in self._outputs]

    def close(self) -> None:
        self._request = None
        self._compiled = None
        self._outputs = []


class OpenVinoBackend(InferenceBackend):
    name = "openvino"

    def availability(self) -> Availability:
        try:
            import openvino as ov
        except ImportError as exc:
            return Availability(ok=False, reason=f"openvino is not installed ({exc})")
        core = ov.Core()
        present = core.available_devices
        if not present:
            return Availability(ok=False, reason="OpenVINO sees no device it can run on")
        names = [f"{name} ({_device_name(core, name)})" for name in present]
        precisions: dict[str, list[str]] = {}
        for name in present:
            capabilities = set(core.get_property(name, "OPTIMIZATION_CAPABILITIES"))
            kind = precisions.setdefault(_our_device(name), [])
            kind.extend(p for p, c in CAPABILITY_OF.items() if c in capabilities and p not in kind)
        return Availability(
            ok=True,
            devices=sorted({_our_device(name) for name in present}),
            precisions=precisions,
            versions={"openvino": ov.__version__.split("-", 1)[0]},
            reason=f"devices: {', '.join(names)}",
        )

    def load(self, model_path: Path, options: SessionOptions) -> LoadedModel:
        ov = import_openvino()
        core = ov.Core()
        device = _ov_device(core, options.device)
        _check_precision(core, device, options.precision)
        if options.cache_dir:
            Path(options.cache_dir).mkdir(parents=True, exist_ok=True)
            core.set_property({"CACHE_DIR": options.cache_dir})
        graph = None
        try:
            graph = read_model(ov, core, Path(model_path))
            compiled = core.compile_model(graph, device, compile_config(options))
        except Exception as exc:  # the runtime raises its own untyped errors
            if graph is not None and needs_static_shapes(graph, exc):
                return reshaped_per_run(core, graph, device, options, exc)
            raise ModelLoadError(
                f"OpenVINO could not load this model: {runtime_message(exc)}",
                hint="Check that its operators are supported by OpenVINO "
                f"{ov.__version__.split('-', 1)[0]}, or run it with onnxruntime instead.",
            ) from exc
        if graph.has_rt_info(SPECIALIZED):
            return specialized(core, graph, device, options, compiled)
        details = compiled_details(compiled, options)
        if "fallback" in details:
            logger.warning("OpenVINO fallback: %s", details["fallback"])
        return OpenVinoModel(compiled, details)


def needs_static_shapes(graph: Any, exc: Exception) -> bool:
    """Whether a graph with dynamic inputs failed to compile for a dynamic shape or rank
    ("CPU plug-in doesn't support Squeeze operation with dynamic rank")."""
    dynamic = any(parameter.get_partial_shape().is_dynamic for parameter in graph.inputs)
    return dynamic and "dynamic" in str(exc).lower()


def reshaped_per_run(
    core: Any, graph: Any, device: str, options: SessionOptions, exc: Exception
) -> LoadedModel:
    """The graph compiled at each run's input shapes (optistudio.core.backends.
    openvino_static), as the dynamic graph does not compile."""

    def compile_at(shapes: dict[str, list[int]]) -> Any:
        graph.reshape(shapes)
        return core.compile_model(graph, device, compile_config(options))

    why = f"the dynamic graph does not compile ({runtime_message(exc)})"
    logger.info("OpenVINO compiles this model per input shapes: %s", why)
    return ReshapedOpenVinoModel(
        compile_at, lambda compiled: compiled_details(compiled, options), runtime_message, why
    )


def specialized(
    core: Any, graph: Any, device: str, options: SessionOptions, compiled: Any
) -> LoadedModel:
    """An IR the ov_static pass fixed at its run's input shapes (openvino_static.SPECIALIZED):
    run compiled at them, and compiled reshaped at any other shapes it is fed."""
    shapes = {port.get_any_name(): list(port.get_shape()) for port in graph.inputs}

    def compile_at(wanted: dict[str, list[int]]) -> Any:
        graph.reshape(wanted)
        return core.compile_model(graph, device, compile_config(options))

    fixed = ", ".join(f"{name}={dims}" for name, dims in shapes.items())
    return ReshapedOpenVinoModel(
        compile_at,
        lambda made: compiled_details(made, options),
        runtime_message,
        f"an IR fixed at the input shapes {fixed} (static shapes run faster on OpenVINO)",
        first=(shapes, compiled),
    )


def read_model(ov: Any, core: Any, model_path: Path) -> Any:
    """The model as OpenVINO's graph: ONNX through ov.convert_model, IR through read_model.

    Core.read_model on a QDQ ONNX file keeps each QuantizeLinear/DequantizeLinear pair
    decomposed, and the CPU plugin then feeds an INT8 Conv that reads a Concat of quantized
    branches the wrong values (seen with OpenVINO 2026.4 on an AVX2 CPU: NNCF's INT8 PP-OCR
    detector scored cosine 0.11 against FP32, 0.98 on ONNX Runtime; ONNX Runtime's static INT8
    of it did not compile). convert_model folds each pair into one FakeQuantize first, as
    OpenVINO's own conversion does, and runs both right (bench/det_int8_probe.py).
    """
    if model_path.suffix.lower() == ".onnx":
        return ov.convert_model(str(model_path))
    return core.read_model(str(model_path))


def compile_config(options: SessionOptions) -> dict[str, Any]:
    """SessionOptions -> the properties passed to compile_model."""
    config: dict[str, Any] = {"INFERENCE_PRECISION_HINT": PRECISION_HINTS[options.precision]}
    if options.threads:
        config["INFERENCE_NUM_THREADS"] = options.threads
    if options.performance_hint:
        config["PERFORMANCE_HINT"] = options.performance_hint.upper()
    if options.streams:
        config["NUM_STREAMS"] = options.streams
    return config


def compiled_details(compiled: Any, options: SessionOptions) -> dict[str, Any]:
    """What the compiled model really uses, read back from it (not what we asked for)."""
    precision = _precision_name(compiled.get_property("INFERENCE_PRECISION_HINT"))
    layers = layer_precisions(compiled)
    details: dict[str, Any] = {
        "execution_devices": list(compiled.get_property("EXECUTION_DEVICES")),
        "requested_precision": options.precision,
        "inference_precision": precision,
        "layer_precisions": layers,
        "threads": int(compiled.get_property("INFERENCE_NUM_THREADS")),
        "streams": int(compiled.get_property("NUM_STREAMS")),
        "performance_hint": str(compiled.get_property("PERFORMANCE_HINT")).lower(),
        "optimal_infer_requests": int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")),
        "memory_pool": _memory_pool_note(options),
        "ignored_options": _ignored_options(options),
    }
    if options.cache_dir:
        details["cache_dir"] = options.cache_dir
        details["loaded_from_cache"] = bool(compiled.get_property("LOADED_FROM_CACHE"))
    fallback = _fallback(options.precision, precision, layers)
    if fallback:
        details["fallback"] = fallback
    return details


def layer_precisions(compiled: Any) -> dict[str, int]:
    """How many compiled layers (not inputs, outputs or constants) run in each precision."""
    counts: Counter[str] = Counter()
    for op in compiled.get_runtime_model().get_ops():
        info = op.get_rt_info()
        if info["layerType"].astype(str) not in BOOKKEEPING_LAYERS:
            counts[info["runtimePrecision"].astype(str)] += 1
    return dict(sorted(counts.items()))


def runtime_message(exc: Exception) -> str:
    """OpenVINO's message without its 'Exception from src/...' and 'Check ... failed' lines."""
    lines = [line.strip() for line in str(exc).splitlines()]
    useful = [line for line in lines if line and not NOISE_LINE.match(line)]
    return " ".join(useful)[:400] or type(exc).__name__


def _fallback(requested: str, precision: str, layers: dict[str, int]) -> str | None:
    if requested == "int8":
        if layers.get("i8", 0) + layers.get("u8", 0) == 0:
            return (
                "int8 was requested but no layer runs in int8: the model is not quantized, so it "
                "runs in f32 (quantize it first: the int8 passes or NNCF)"
            )
        return None
    if precision != requested:
        return f"{requested} was requested but OpenVINO compiled the model for {precision}"
    return None


def _check_precision(core: Any, device: str, precision: str) -> None:
    capabilities = set(core.get_property(device, "OPTIMIZATION_CAPABILITIES"))
    valid = [ours for ours, theirs in CAPABILITY_OF.items() if theirs in capabilities]
    if precision not in valid:
        raise InvalidSpec(
            f"OpenVINO cannot run {precision!r} on {device} "
            f"({_device_name(core, device)}). Valid precisions here: {', '.join(valid)}.",
            hint="bf16 needs a CPU with AVX-512 BF16 or AMX; fp16 needs a GPU or a CPU with "
            "AMX-FP16. Pick one of the valid precisions.",
        )


def _ov_device(core: Any, device: str) -> str:
    """'cpu' -> 'CPU', 'gpu:1' -> 'GPU.1', checked against the devices OpenVINO sees."""
    kind, _, index = device.lower().partition(":")
    if kind not in DEVICE_KINDS:
        raise InvalidSpec(
            f"OpenVINO has no device kind {device!r}. Valid kinds: {', '.join(DEVICE_KINDS)}."
        )
    name = DEVICE_KINDS[kind] + (f".{index}" if index else "")
    present = core.available_devices
    if not any(p == name or (not index and p.startswith(f"{name}.")) for p in present):
        valid = ", ".join(_our_device(p) for p in present)
        raise InvalidSpec(f"OpenVINO sees no {device!r} here. Devices present: {valid}.")
    return name


def _our_device(ov_name: str) -> str:
    return ov_name.split(".", 1)[0].lower()


def _device_name(core: Any, device: str) -> str:
    try:
        return str(core.get_property(device, "FULL_DEVICE_NAME"))
    except Exception:  # a device plugin may not answer; the name is only decoration
        return "unknown model"


def _precision_name(element_type: Any) -> str:
    name = element_type.get_type_name() if hasattr(element_type, "get_type_name") else element_type
    return PRECISION_NAMES.get(str(name), str(name))


def _memory_pool_note(options: SessionOptions) -> str:
    if options.memory_pool_ratio is None:
        return "OpenVINO's default allocator"
    return (
        f"memory_pool_ratio={options.memory_pool_ratio} not applied: OpenVINO has no setting "
        "for the share of device memory a model may pool"
    )


def _ignored_options(options: SessionOptions) -> dict[str, str]:
    ignored = {}
    if options.inter_op_threads:
        ignored["inter_op_threads"] = "OpenVINO runs graph branches inside its streams"
    if not options.spin_wait:
        ignored["spin_wait"] = "OpenVINO has no spin-wait setting"
    return ignored


def import_openvino() -> Any:
    """openvino, or BackendUnavailable saying how to install it."""
    try:
        import openvino as ov
    except ImportError as exc:
        raise BackendUnavailable(
            f"openvino is not installed ({exc}).", hint="pip install 'openvino>=2024.4'"
        ) from exc
    return ov
