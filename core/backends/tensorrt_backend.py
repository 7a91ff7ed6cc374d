"""TensorRT backend: a native engine built from the ONNX model for one CUDA GPU (TensorRT 10).

How it runs, following TensorRT's documented Python API:
- load(): OnnxParser fills a network (explicit batch is the only mode since TensorRT 10), so an
  unsupported operator is a ModelLoadError at once. A model with static shapes is built then.
- A model with dynamic dims gets one engine per input-shape signature, built on the first run of
  that signature with an optimization profile min = opt = max = those shapes (the fastest
  kernels for exactly what is measured; the benchmark's warm-up absorbs the build).
- BuilderConfig: FP16 / INT8 flags for 'fp16' / 'int8' (INT8 wants a QDQ model: TensorRT 10
  deprecates implicit calibration), a timing cache, and the workspace pool capped at
  memory_pool_ratio of the device's memory. Engines are serialized; with cache_dir they are
  written there (with the timing cache) and a later load deserializes them with IRuntime.
- run(): set_input_shape / set_tensor_address on device buffers held by torch (the documented
  integer-pointer route), execute_async_v3 on a torch CUDA stream, synchronize, copy outputs back.
- What TensorRT really chose is read back with the engine inspector (`layer_precisions`); a
  requested precision that no layer uses is recorded as a fallback.
TensorRT, torch and CUDA are imported only here and only when used.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from optistudio.core.backends.base import (
    Availability,
    InferenceBackend,
    LoadedModel,
    SessionOptions,
)
from optistudio.core.errors import BackendUnavailable, InferenceFailed, InvalidSpec, ModelLoadError

logger = logging.getLogger(__name__)

PRECISIONS = ("fp32", "fp16", "int8")
BUILDER_FLAGS = {"fp32": (), "fp16": ("FP16",), "int8": ("INT8",)}
TIMING_CACHE_FILE = "tensorrt.timing.cache"
Shapes = tuple[tuple[str, tuple[int, ...]], ...]
"""An input-shape signature: ((name, dims), ...) in the network's input order."""


class TensorRtBackend(InferenceBackend):
    name = "tensorrt"

    def availability(self) -> Availability:
        try:
            import tensorrt as trt
        except ImportError:
            return Availability(ok=False, reason="tensorrt is not installed")
        problem = cuda_problem()
        if problem:
            return Availability(ok=False, reason=problem, versions={"tensorrt": trt.__version__})
        import torch

        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        return Availability(
            ok=True,
            devices=["cuda"],
            precisions={"cuda": list(PRECISIONS)},
            versions={"tensorrt": trt.__version__, "torch": torch.__version__},
            reason="devices: " + ", ".join(f"cuda:{i} ({n})" for i, n in enumerate(names)),
        )

    def load(self, model_path: Path, options: SessionOptions) -> LoadedModel:
        check_precision(options.precision)
        trt = _import_tensorrt()
        check_builder_flags(trt, options.precision)
        device = cuda_index(options.device)
        builder = EngineBuilder(trt, model_path, options, device)
        model = TensorRtModel(builder)
        if not builder.dynamic:
            try:
                model.engine_for(builder.static_shapes())
            except InferenceFailed as exc:  # a static model is built at load: a load error
                raise ModelLoadError(exc.message, hint=exc.hint) from exc
        return model


class TensorRtModel(LoadedModel):
    """Engines by input-shape signature, each with its execution context."""

    def __init__(self, builder: EngineBuilder) -> None:
        self._builder = builder
        self._engines: dict[Shapes, tuple[Any, Any]] = {}
        self.details = builder.details

    def engine_for(self, shapes: Shapes) -> tuple[Any, Any]:
        """(engine, execution context) for these input shapes, built on first use."""
        if shapes not in self._engines:
            engine = self._builder.engine(shapes)
            context = engine.create_execution_context()
            if context is None:
                raise InferenceFailed(
                    f"TensorRT could not create an execution context: {self._builder.recorder.last()}",
                    hint="The GPU may be out of memory; close other sessions or use a smaller batch.",
                )
            self._engines[shapes] = (engine, context)
        return self._engines[shapes]

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        if self._builder.closed:
            raise InferenceFailed("This TensorRT model was closed; load it again to run it.")
        check_feeds(self._builder.inputs, feeds)
        shapes = tuple((name, tuple(feeds[name].shape)) for name in self._builder.inputs)
        engine, context = self.engine_for(shapes)
        return execute(self._builder, engine, context, feeds)

    def close(self) -> None:
        self._engines.clear()
        self._builder.close()


class EngineBuilder:
    """The parsed network and the build settings; builds or deserializes engines."""

    def __init__(self, trt: Any, model_path: Path, options: SessionOptions, device: int) -> None:
        import torch

        self.trt, self.options, self.device, self.closed = trt, options, device, False
        self.torch = torch
        self.recorder = error_recorder(trt)
        self.builder = trt.Builder(self.recorder)
        self.network = self.builder.create_network(0)
        self.parser = trt.OnnxParser(self.network, self.recorder)
        self.model_digest = _parse(self.parser, model_path, self.recorder)
        self.inputs = _network_inputs(trt, self.network)
        self.outputs = [self.network.get_output(i).name for i in range(self.network.num_outputs)]
        self.dynamic = any(-1 in shape for shape, _ in self.inputs.values())
        self.stream = torch.cuda.Stream(device=device)
        self.details = self._initial_details()

    def static_shapes(self) -> Shapes:
        return tuple((name, shape) for name, (shape, _) in self.inputs.items())

    def engine(self, shapes: Shapes) -> Any:
        """An engine for these input shapes: from cache_dir when there, else built now."""
        path = self._engine_path(shapes)
        serialized = path.read_bytes() if path and path.exists() else None
        from_cache = serialized is not None
        if serialized is None:
            serialized = self._build(shapes)
            if path:
                path.write_bytes(serialized)
        engine = self.trt.Runtime(self.recorder).deserialize_cuda_engine(serialized)
        if engine is None:
            raise InferenceFailed(
                f"TensorRT could not deserialize the engine: {self.recorder.last()}",
                hint="Delete the cached .engine files (they may come from another TensorRT "
                "version or GPU) and run again.",
            )
        self._record_engine(engine, shapes, path, from_cache)
        return engine

    def close(self) -> None:
        self.closed = True
        self.parser = self.network = self.builder = None

    def _build(self, shapes: Shapes) -> bytes:
        self.recorder.errors.clear()
        config = self._builder_config(shapes)
        serialized = self.builder.build_serialized_network(self.network, config)
        if serialized is None:
            raise InferenceFailed(
                f"TensorRT could not build an engine for inputs {describe(shapes)}: "
                f"{self.recorder.last()}",
                hint="Try another precision, a smaller memory_pool_ratio, or onnxruntime.",
            )
        self._save_timing_cache(config)
        return bytes(serialized)

    def _builder_config(self, shapes: Shapes) -> Any:
        trt, config = self.trt, self.builder.create_builder_config()
        for flag in BUILDER_FLAGS[self.options.precision]:
            config.set_flag(getattr(trt.BuilderFlag, flag))
        config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
        pool = self._workspace_bytes()
        if pool:
            config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, pool)
        cache = self._timing_cache_path()
        blob = cache.read_bytes() if cache and cache.exists() else b""
        config.set_timing_cache(config.create_timing_cache(blob), ignore_mismatch=False)
        if self.dynamic:
            profile = self.builder.create_optimization_profile()
            for name, dims in shapes:
                profile.set_shape(name, dims, dims, dims)
            config.add_optimization_profile(profile)
        return config

    def _workspace_bytes(self) -> int | None:
        ratio = self.options.memory_pool_ratio
        if ratio is None:
            return None
        total = self.torch.cuda.get_device_properties(self.device).total_memory
        return int(total * ratio)

    def _save_timing_cache(self, config: Any) -> None:
        path = self._timing_cache_path()
        if path:
            path.write_bytes(bytes(config.get_timing_cache().serialize()))

    def _timing_cache_path(self) -> Path | None:
        if not self.options.cache_dir:
            return None
        folder = Path(self.options.cache_dir)
        folder.mkdir(parents=True, exist_ok=True)
        return folder / TIMING_CACHE_FILE

    def _engine_path(self, shapes: Shapes) -> Path | None:
        if not self.options.cache_dir:
            return None
        gpu = "sm{}{}".format(*self.torch.cuda.get_device_capability(self.device))
        name = engine_file_name(
            self.model_digest, self.options.precision, shapes, self.trt.__version__, gpu
        )
        return Path(self.options.cache_dir) / name

    def _record_engine(self, engine: Any, shapes: Shapes, path: Path | None, cached: bool) -> None:
        layers = layer_precisions(self.trt, engine)
        self.details["engines"].append(
            {
                "shapes": {name: list(dims) for name, dims in shapes},
                "from_cache": cached,
                "path": str(path) if path else None,
                "layer_precisions": layers,
            }
        )
        fallback = precision_fallback(self.options.precision, layers)
        if fallback:
            logger.warning("TensorRT fallback: %s", fallback)
            self.details.setdefault("fallbacks", []).append(fallback)

    def _initial_details(self) -> dict[str, Any]:
        torch, options = self.torch, self.options
        return {
            "device": f"cuda:{self.device} ({torch.cuda.get_device_name(self.device)})",
            "tensorrt": self.trt.__version__,
            "requested_precision": options.precision,
            "builder_flags": list(BUILDER_FLAGS[options.precision]),
            "dynamic_shapes": "one engine per input-shape signature" if self.dynamic else "none",
            "memory_pool": _memory_pool_note(options, self._workspace_bytes()),
            "io_binding": "inputs and outputs bound as device buffers (set_tensor_address)",
            "cache_dir": options.cache_dir,
            "ignored_options": ignored_options(options),
            "engines": [],
        }


def execute(
    builder: EngineBuilder, engine: Any, context: Any, feeds: dict[str, np.ndarray]
) -> list[np.ndarray]:
    """One synchronous inference: bind device buffers, enqueue, wait, copy outputs back."""
    torch, trt = builder.torch, builder.trt
    builder.recorder.errors.clear()
    # Copies and the engine share one stream, so the engine sees the inputs in place.
    with torch.cuda.device(builder.device), torch.cuda.stream(builder.stream):
        device_inputs = {
            name: torch.from_numpy(np.ascontiguousarray(feeds[name])).cuda()
            for name in builder.inputs
        }
        for name, tensor in device_inputs.items():
            if not context.set_input_shape(name, tuple(tensor.shape)):
                raise InferenceFailed(
                    f"TensorRT refused the shape of input {name!r}: {list(tensor.shape)}."
                )
            context.set_tensor_address(name, tensor.data_ptr())
        device_outputs = {}
        for name in builder.outputs:
            dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(name)))
            shape = tuple(context.get_tensor_shape(name))
            if any(dim < 0 for dim in shape):
                raise InferenceFailed(
                    f"TensorRT output {name!r} has a data-dependent shape {list(shape)}, which "
                    "this backend does not support yet.",
                    hint="Run this model with onnxruntime or openvino.",
                )
            torch_dtype = torch.from_numpy(np.empty(0, dtype)).dtype
            device_outputs[name] = torch.empty(shape, dtype=torch_dtype, device="cuda")
            context.set_tensor_address(name, device_outputs[name].data_ptr())
        if not context.execute_async_v3(builder.stream.cuda_stream):
            raise InferenceFailed(
                f"TensorRT could not run inputs {describe_feeds(feeds)}: {builder.recorder.last()}"
            )
        builder.stream.synchronize()
    return [device_outputs[name].cpu().numpy() for name in builder.outputs]


def cuda_problem() -> str | None:
    """Why no CUDA device can take TensorRT's buffers here, or None when one can."""
    try:
        import torch
    except ImportError:
        return "no CUDA device: PyTorch with CUDA is needed to hand buffers to TensorRT"
    if not torch.cuda.is_available():
        return f"no CUDA device (torch {torch.__version__} sees none)"
    return None


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise InvalidSpec(
            f"TensorRT cannot be asked for {precision!r}. Valid precisions: {', '.join(PRECISIONS)}.",
            hint="fp16 is TensorRT's fast reduced precision on NVIDIA GPUs.",
        )


def cuda_index(device: str) -> int:
    """'cuda' -> 0, 'cuda:1' -> 1; anything else is an InvalidSpec."""
    kind, _, index = device.lower().partition(":")
    if kind != "cuda" or (index and not index.isdigit()):
        raise InvalidSpec(
            f"TensorRT runs on CUDA devices only, not {device!r}. Valid devices: cuda, cuda:N."
        )
    import torch

    count = torch.cuda.device_count()
    if int(index or 0) >= count:
        raise InvalidSpec(f"There is no {device!r} here; this machine has {count} CUDA device(s).")
    return int(index or 0)


def check_feeds(
    inputs: Mapping[str, tuple[tuple[int, ...], np.dtype]], feeds: Mapping[str, np.ndarray]
) -> None:
    """InferenceFailed when feeds miss an input or break a static dim or the dtype."""
    missing = [name for name in inputs if name not in feeds]
    if missing:
        raise InferenceFailed(f"TensorRT needs inputs {missing}; got {sorted(feeds)}.")
    for name, (dims, dtype) in inputs.items():
        array = feeds[name]
        fits = len(dims) == array.ndim and all(
            d in (-1, a) for d, a in zip(dims, array.shape, strict=False)
        )
        if not fits or array.dtype != dtype:
            raise InferenceFailed(
                f"TensorRT could not run this model on inputs {describe_feeds(feeds)}: input "
                f"{name!r} must be {dtype} of shape {list(dims)} (-1 = any).",
                hint="Set the input sizes (CLI: --shape NAME=D1,D2,... or --dim NAME=N).",
            )


def engine_file_name(digest: str, precision: str, shapes: Shapes, version: str, gpu: str) -> str:
    """A file name that changes whenever the engine would: model, precision, shapes, TRT, GPU."""
    signature = "_".join(f"{name}-{'x'.join(map(str, dims))}" for name, dims in shapes)
    short = hashlib.sha256(signature.encode()).hexdigest()[:12]
    return f"{digest[:16]}-{precision}-{short}-trt{version}-{gpu}.engine"


def layer_precisions(trt: Any, engine: Any) -> dict[str, int]:
    """Layers by the precision of their outputs, from the engine inspector (DETAILED build)."""
    try:
        inspector = engine.create_engine_inspector()
        info = json.loads(inspector.get_engine_information(trt.LayerInformationFormat.JSON))
    except Exception as exc:  # the inspector is best effort; the record says so
        return {f"unknown ({type(exc).__name__})": 0}
    return count_layer_precisions(info)


def count_layer_precisions(info: dict[str, Any]) -> dict[str, int]:
    """{'fp16': 12, 'fp32': 3} from the inspector's JSON; a layer counts by its first output."""
    counts: Counter[str] = Counter()
    for layer in info.get("Layers", []):
        outputs = layer.get("Outputs", []) if isinstance(layer, dict) else []
        text = str(outputs[0].get("Format/Datatype", "")) if outputs else ""
        counts[_precision_in(text)] += 1
    return dict(sorted(counts.items()))


def _precision_in(text: str) -> str:
    lowered = text.lower()
    for needle, name in (("int8", "int8"), ("bf16", "bf16"), ("fp16", "fp16"), ("half", "fp16")):
        if needle in lowered:
            return name
    return "fp32" if ("fp32" in lowered or "float" in lowered) else "other"


def precision_fallback(requested: str, layers: dict[str, int]) -> str | None:
    if requested == "fp32" or layers.get(requested, 0) or not layers or "other" in layers:
        return None
    return (
        f"{requested} was requested but no layer runs in {requested}: TensorRT chose "
        f"{', '.join(layers)} kernels (INT8 needs a QDQ-quantized model)"
    )


def ignored_options(options: SessionOptions) -> dict[str, str]:
    reasons = {
        "threads": "TensorRT runs on the GPU; CPU threads do not apply",
        "inter_op_threads": "TensorRT runs on the GPU; CPU threads do not apply",
        "performance_hint": "TensorRT has no performance hints; one engine per shape is built",
        "streams": "one CUDA stream per model",
    }
    ignored = {name: why for name, why in reasons.items() if getattr(options, name)}
    if not options.spin_wait:
        ignored["spin_wait"] = "TensorRT has no spin-wait setting"
    return ignored


def _memory_pool_note(options: SessionOptions, workspace: int | None) -> str:
    if workspace is None:
        return "builder workspace: TensorRT's default (the device's memory)"
    return (
        f"builder workspace capped at {workspace / 2**20:.0f} MiB "
        f"(memory_pool_ratio={options.memory_pool_ratio} of the device's memory)"
    )


def describe(shapes: Shapes) -> str:
    return ", ".join(f"{name}={list(dims)}" for name, dims in shapes)


def describe_feeds(feeds: Mapping[str, np.ndarray]) -> str:
    return ", ".join(f"{name}={list(array.shape)}" for name, array in feeds.items())


def error_recorder(trt: Any) -> Any:
    """A TensorRT logger that keeps error messages, so failures can quote the runtime."""

    errors_severities = {trt.ILogger.Severity.INTERNAL_ERROR, trt.ILogger.Severity.ERROR}

    class ErrorRecorder(trt.ILogger):  # type: ignore[misc]
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.errors: list[str] = []

        def log(self, severity: Any, msg: str) -> None:
            if severity in errors_severities:
                self.errors.append(msg)
            else:
                logger.debug("TensorRT: %s", msg)

        def last(self) -> str:
            return (
                self.errors[-1].strip().splitlines()[0][:400] if self.errors else "no reason given"
            )

    return ErrorRecorder()


def _parse(parser: Any, model_path: Path, recorder: Any) -> str:
    """Parse the ONNX file into the network; returns the model's sha256."""
    data = model_path.read_bytes()
    recorder.errors.clear()
    if not parser.parse(data, str(model_path)):
        errors: Sequence[Any] = [parser.get_error(i) for i in range(parser.num_errors)]
        first = str(errors[0]).strip().splitlines()[0][:400] if errors else recorder.last()
        raise ModelLoadError(
            f"TensorRT could not parse this model: {first}",
            hint="Check that its operators are supported by TensorRT's ONNX parser, or run it "
            "with onnxruntime instead.",
        )
    return hashlib.sha256(data).hexdigest()


def _network_inputs(trt: Any, network: Any) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    inputs = {}
    for index in range(network.num_inputs):
        tensor = network.get_input(index)
        inputs[tensor.name] = (tuple(tensor.shape), np.dtype(trt.nptype(tensor.dtype)))
    return inputs


def _import_tensorrt() -> Any:
    try:
        import tensorrt as trt
    except ImportError as exc:
        raise BackendUnavailable(
            "tensorrt is not installed.",
            hint="Install TensorRT 10 on a machine with an NVIDIA GPU (pip install tensorrt).",
        ) from exc
    problem = cuda_problem()
    if problem:
        raise BackendUnavailable(f"TensorRT cannot run here: {problem}.")
    return trt


def check_builder_flags(trt: Any, precision: str) -> None:
    """TensorRT 11 removed the FP16/INT8 flags (strong typing instead): refuse, don't guess."""
    missing = [flag for flag in BUILDER_FLAGS[precision] if not hasattr(trt.BuilderFlag, flag)]
    if missing:
        valid = [
            p
            for p, flags in BUILDER_FLAGS.items()
            if all(hasattr(trt.BuilderFlag, f) for f in flags)
        ]
        raise InvalidSpec(
            f"TensorRT {trt.__version__} has no {missing[0]} builder flag, so it cannot be asked "
            f"for {precision!r}. Valid precisions with this version: {', '.join(valid)}.",
            hint="Benchmark an FP16 or INT8 (QDQ) variant of the model with precision fp32.",
        )
