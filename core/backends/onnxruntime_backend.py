"""ONNX Runtime backend: the CPU execution provider always, CUDA / TensorRT / OpenVINO / oneDNN /
CANN execution providers when the installed build has them (onnxruntime-gpu,
onnxruntime-openvino, onnxruntime-cann on Huawei Ascend NPUs, device npu:N).

Surprises worth knowing:
- ONNX Runtime silently falls back to the CPU provider when a requested provider cannot start
  (missing CUDA or TensorRT libraries, a mismatched cuDNN). We compare the providers the session
  really got with the request and refuse a run that fell back: a "CUDA" figure measured on the
  CPU would be a lie. The reason names what was requested and what was used.
- The precision of an ONNX Runtime run is the precision the model is stored in: 'fp32' and
  'int8' run the file as it is (an INT8 QDQ model runs its quantized kernels). Only the TensorRT
  provider converts at build time ('fp16' / 'int8' builder flags).
- On a GPU, ONNX Runtime's CUDA provider computes FP32 MatMul / Conv in TF32 by default
  (Ampere and later). We turn that off (use_tf32=0): 'fp32' is FP32.
- memory_pool_ratio caps the pool the session's memory comes from: on CUDA the arena
  (gpu_mem_limit = ratio x the GPU's memory), with the TensorRT provider its workspace
  (trt_max_workspace_size), on the CPU provider a CPU arena of its own (max_mem = ratio x the
  host's memory, grown by what is requested, kSameAsRequested). ONNX Runtime gives a session a
  capped CPU arena only through the process's shared allocator: we register a fresh one just
  before creating the session (under a lock) and the session keeps it, so each session has its
  own cap. A run that needs more fails with the arena's "Available memory ..." message.
- IO binding (`io_binding=True`) uploads an input array to the device once and keeps it bound:
  benchmarks then time the model, not the host-to-device copy. The cache is keyed by the array
  objects; a caller that changes an array in place must pass a new array.
"""

from __future__ import annotations

import threading
from importlib.metadata import PackageNotFoundError, version
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
from optistudio.core.backends.blame import user_file_hint
from optistudio.core.backends.loadable import cleaned_message, known_cause
from optistudio.core.errors import (
    BackendUnavailable,
    InferenceFailed,
    InvalidSpec,
    ModelLoadError,
    first_line,
)
from optistudio.core.machine.gpus import gpu_memory_bytes, nvidia_gpus

PROVIDER_NAMES = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
    "dnnl": "DnnlExecutionProvider",
    "cann": "CANNExecutionProvider",
}
DEVICE_OF_PROVIDER = {
    "cpu": "cpu",
    "dnnl": "cpu",
    "openvino": "cpu",
    "cuda": "cuda",
    "tensorrt": "cuda",
    "cann": "npu",
}
DEFAULT_PROVIDER = {"cpu": "cpu", "cuda": "cuda", "npu": "cann"}
PACKAGE_OF_PROVIDER = {
    "cuda": "onnxruntime-gpu",
    "tensorrt": "onnxruntime-gpu (and TensorRT's libraries)",
    "openvino": "onnxruntime-openvino",
    "dnnl": "an ONNX Runtime build with oneDNN",
    "cann": "onnxruntime-cann with Huawei's Ascend CANN toolkit and an Ascend NPU driver",
}
CANN_MISSING = (
    "needs Huawei's Ascend CANN toolkit and an Ascend NPU driver; onnxruntime-cann is not installed"
)
"""Why the CANN provider cannot run where the installed ONNX Runtime build lacks it."""
PACKAGES = ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino", "onnxruntime-cann")
SAME_AS_REQUESTED = 1
"""ONNX Runtime's ArenaExtendStrategy kSameAsRequested: the arena grows by what is asked for."""

_shared_arena_lock = threading.Lock()
"""Held from registering a session's CPU arena until the session holds it (it is process-wide)."""


class OnnxRuntimeSession(LoadedModel):
    def __init__(
        self, session: Any, details: dict[str, Any], *, bind_to: tuple[str, int] | None = None
    ) -> None:
        self._session = session
        self.details = details
        self._bind_to = bind_to
        self._binding: Any = None
        self._bound_key: tuple[int, ...] = ()
        self._bound_values: list[Any] = []

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        if self._session is None:
            raise InferenceFailed("This ONNX Runtime session was closed; load the model again.")
        try:
            if self._bind_to is not None:
                return self._run_bound(feeds)
            outputs: list[np.ndarray] = self._session.run(None, feeds)
        except Exception as exc:  # the runtime raises its own untyped errors
            shapes = ", ".join(f"{name}={list(array.shape)}" for name, array in feeds.items())
            raise InferenceFailed(
                f"ONNX Runtime could not run this model on inputs {shapes}: {first_line(exc)}",
                hint="The model may need other input sizes: set them (CLI: --shape NAME=D1,D2,... "
                "or --dim NAME=N; studio: the dims of the benchmark form).",
            ) from exc
        return outputs

    def _run_bound(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        import onnxruntime as ort

        assert self._bind_to is not None
        device_type, device_id = self._bind_to
        if self._binding is None:
            self._binding = self._session.io_binding()
        binding = self._binding
        key = (id(feeds), *(id(array) for array in feeds.values()))
        if key != self._bound_key:
            binding.clear_binding_inputs()
            self._bound_values = []
            for name, array in feeds.items():
                value = ort.OrtValue.ortvalue_from_numpy(
                    np.ascontiguousarray(array), device_type, device_id
                )
                binding.bind_ortvalue_input(name, value)
                self._bound_values.append(value)  # the binding does not own them
            self._bound_key = key
        binding.clear_binding_outputs()
        for output in self._session.get_outputs():
            binding.bind_output(output.name, device_type, device_id)
        self._session.run_with_iobinding(binding)
        outputs: list[np.ndarray] = binding.copy_outputs_to_cpu()
        return outputs

    def close(self) -> None:
        self._session = None
        self._binding = None
        self._bound_values = []


class OnnxRuntimeBackend(InferenceBackend):
    name = "onnxruntime"

    def availability(self) -> Availability:
        try:
            import onnxruntime as ort
        except ImportError as exc:
            return Availability(ok=False, reason=f"onnxruntime is not installed ({exc})")
        built = ort.get_available_providers()
        ours = [key for key, name in PROVIDER_NAMES.items() if name in built]
        devices = ["cpu"]
        notes = [f"providers: {', '.join(ours)}"]
        gpus = nvidia_gpus()
        gpu_providers = [key for key in ours if DEVICE_OF_PROVIDER[key] == "cuda"]
        if gpu_providers and gpus:
            devices.append("cuda")
            notes.append("GPUs: " + ", ".join(f"{gpu.device} ({gpu.name})" for gpu in gpus))
        elif gpu_providers:
            notes.append("no NVIDIA GPU or driver here, so the CUDA providers cannot run")
        elif gpus:
            notes.append(
                "this build has no CUDA provider for the GPU here: pip install onnxruntime-gpu"
            )
        if "cann" in ours:
            devices.append("npu")
        precisions = {"cpu": ["fp32", "int8"]}
        if "cuda" in devices:
            precisions["cuda"] = ["fp32", "int8"] + (["fp16"] if "tensorrt" in ours else [])
        if "npu" in devices:
            precisions["npu"] = ["fp32", "int8"]
        return Availability(
            ok=True,
            devices=devices,
            versions=_versions(),
            precisions=precisions,
            reason="; ".join(notes),
        )

    def load(self, model_path: Path, options: SessionOptions) -> LoadedModel:
        import onnxruntime as ort

        kind, index = _parse_device(options.device)
        provider = _provider_for(ort, kind, index, options.execution_provider)
        _check_precision(options.precision, provider)
        providers = _providers(provider, index, options)
        arena = cpu_arena_config(options, provider)
        try:
            session = _create_session(ort, model_path, options, providers, arena)
        except Exception as exc:  # the runtime raises its own untyped errors
            raise load_failure(str(exc), Path(model_path), provider, ort.__version__) from exc
        got = session.get_providers()
        if PROVIDER_NAMES[provider] not in got:
            raise BackendUnavailable(
                f"ONNX Runtime was asked for the {provider} execution provider but started only "
                f"{', '.join(got)}: it fell back, so a run here would not measure {provider}.",
                hint=f"The {provider} provider's libraries are missing or of another version "
                "(CUDA, cuDNN, TensorRT); check `optistudio backends` on that worker and the "
                "ONNX Runtime requirements for this version.",
            )
        details = {
            "providers": got,
            "requested_provider": PROVIDER_NAMES[provider],
            "provider_options": providers[0][1] if isinstance(providers[0], tuple) else {},
            "device": f"{kind}:{index}" if kind != "cpu" else "cpu",
            # ONNX Runtime's default intra-op pool has one thread per physical core.
            "threads": options.threads or psutil.cpu_count(logical=False) or 1,
            "precision": options.precision,
            "memory_pool": _memory_pool_note(options, provider, index, arena),
            "io_binding": options.io_binding,
            "ignored_options": _ignored_options(options, provider),
        }
        bind_to = (("cuda" if kind == "cuda" else "cpu"), index) if options.io_binding else None
        return OnnxRuntimeSession(session, details, bind_to=bind_to)


def execution_providers() -> dict[str, dict[str, Any]]:
    """Every provider we can ask ONNX Runtime for: its device and whether this build has it.

    `backends --json` lists them under the onnxruntime entry, so a provider that cannot run here
    (TensorRT, CANN) is named with why, as a refused `--provider` would say it.
    """
    try:
        import onnxruntime as ort
    except ImportError:
        built: list[str] = []
    else:
        built = ort.get_available_providers()
    return {
        key: {
            "device": DEVICE_OF_PROVIDER.get(key, "cpu"),
            "available": name in built,
            "reason": "" if name in built else missing_reason(key),
        }
        for key, name in PROVIDER_NAMES.items()
    }


def missing_reason(provider: str) -> str:
    """Why `provider` is absent from this ONNX Runtime build, in one clause."""
    if provider == "cann":
        return CANN_MISSING
    return f"this ONNX Runtime build has none; it comes with {PACKAGE_OF_PROVIDER[provider]}"


def load_failure(message: str, path: Path, provider: str, ort_version: str) -> ModelLoadError:
    """ONNX Runtime's load error as what the user can act on, with no server path.

    The advice follows the cause its message names (intake reads it the same way,
    `loadable.known_cause`): an operator no runtime here implements, an opset or IR version,
    a file that does not parse. Anything else gets its cleaned first line and no opset advice.
    """
    cause = known_cause(message, path)
    if cause is not None:
        return ModelLoadError(
            f"ONNX Runtime could not load this model: {cause.message}", hint=cause.hint
        )
    hint = user_file_hint("ONNX Runtime", ort_version)  # made files: core.backends.blame
    if provider != "cpu":
        hint += f" The {provider} provider may refuse what the CPU provider runs: try device cpu."
    return ModelLoadError(
        f"ONNX Runtime could not load this model: {cleaned_message(message, path)}", hint=hint
    )


def _versions() -> dict[str, str]:
    found = {}
    for package in PACKAGES:
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            continue
    return found


def _parse_device(device: str) -> tuple[str, int]:
    kind, _, index = device.partition(":")
    if kind not in DEFAULT_PROVIDER or (index and not index.isdigit()):
        raise InvalidSpec(
            f"ONNX Runtime has no device {device!r}. Valid devices: cpu, cuda:N (N = GPU index), "
            "npu:N (an Ascend NPU, through the CANN provider)."
        )
    return kind, int(index or 0)


def _provider_for(ort: Any, kind: str, index: int, requested: str | None) -> str:
    provider = requested or DEFAULT_PROVIDER[kind]
    if provider not in PROVIDER_NAMES:
        raise InvalidSpec(
            f"ONNX Runtime has no execution provider {provider!r}. "
            f"Valid providers: {', '.join(PROVIDER_NAMES)}."
        )
    # What the install lacks is said first: no --device would make a missing provider run.
    if PROVIDER_NAMES[provider] not in ort.get_available_providers():
        raise BackendUnavailable(
            f"This ONNX Runtime build ({ort.__version__}) has no {provider} execution provider"
            + (f": it {CANN_MISSING}." if provider == "cann" else "."),
            hint=f"Install {PACKAGE_OF_PROVIDER[provider]} on the worker that should run it.",
        )
    if DEVICE_OF_PROVIDER[provider] != kind:
        raise InvalidSpec(
            f"The {provider} execution provider runs on {DEVICE_OF_PROVIDER[provider]}, not on "
            f"{kind}.",
            hint=f"Use device {DEVICE_OF_PROVIDER[provider]!r} with it, or another provider.",
        )
    if kind == "cuda":
        gpus = [gpu.index for gpu in nvidia_gpus()]
        if index not in gpus:
            have = ", ".join(f"cuda:{i}" for i in gpus) or "none (no NVIDIA driver found)"
            raise BackendUnavailable(f"No CUDA device cuda:{index} here. GPUs here: {have}.")
    return provider


def _check_precision(precision: str, provider: str) -> None:
    valid = ["fp32", "int8"] + (["fp16"] if provider == "tensorrt" else [])
    if precision not in valid:
        raise InvalidSpec(
            f"ONNX Runtime's {provider} provider runs a model in the precision it is stored in, so "
            f"it cannot be asked for {precision!r}. Valid precisions: {', '.join(valid)}.",
            hint="Benchmark an FP16 or INT8 variant of the model (made by the optimize step) "
            "with precision fp32 instead, or use OpenVINO for bf16.",
        )


def _pool_bytes(options: SessionOptions, index: int) -> int | None:
    if options.memory_pool_ratio is None:
        return None
    total = gpu_memory_bytes(index)
    return int(total * options.memory_pool_ratio) if total else None


def _providers(provider: str, index: int, options: SessionOptions) -> list[Any]:
    """The provider list for the session: the requested one with its options, then CPU."""
    if provider in ("cpu", "dnnl"):
        return [PROVIDER_NAMES[provider]] + (["CPUExecutionProvider"] if provider != "cpu" else [])
    settings: dict[str, Any] = {}
    pool = _pool_bytes(options, index)
    if provider == "cuda":
        settings = {
            "device_id": index,
            "arena_extend_strategy": "kSameAsRequested",
            # fp32 means fp32: ONNX Runtime's default lets cuBLAS / cuDNN use TF32 on Ampere and
            # later, which moved ResNet-50's logits by 2e-3 of their range on an H200.
            "use_tf32": 0,
        }
        if pool:
            settings["gpu_mem_limit"] = pool
    elif provider == "cann":
        settings = {"device_id": index, "arena_extend_strategy": "kSameAsRequested"}
    elif provider == "tensorrt":
        settings = {
            "device_id": index,
            "trt_fp16_enable": options.precision == "fp16",
            "trt_int8_enable": options.precision == "int8",
        }
        if pool:
            settings["trt_max_workspace_size"] = pool
        if options.cache_dir:
            Path(options.cache_dir).mkdir(parents=True, exist_ok=True)
            settings.update(
                trt_engine_cache_enable=True,
                trt_engine_cache_path=options.cache_dir,
                trt_timing_cache_enable=True,
                trt_timing_cache_path=options.cache_dir,
            )
    elif provider == "openvino":
        settings = {"device_type": "CPU"}
        if options.cache_dir:
            settings["cache_dir"] = options.cache_dir
    return [(PROVIDER_NAMES[provider], settings), "CPUExecutionProvider"]


def cpu_arena_config(options: SessionOptions, provider: str) -> dict[str, int] | None:
    """The capped CPU arena of a CPU-provider session (OrtArenaCfg keys), or None for the
    default arena: max_mem = memory_pool_ratio x the host's memory, grown as requested."""
    if options.memory_pool_ratio is None or provider != "cpu":
        return None
    total = psutil.virtual_memory().total
    return {
        "max_mem": int(total * options.memory_pool_ratio),
        "arena_extend_strategy": SAME_AS_REQUESTED,
    }


def _create_session(
    ort: Any,
    model_path: Path,
    options: SessionOptions,
    providers: list[Any],
    arena: dict[str, int] | None,
) -> Any:
    """The session; with `arena`, on a CPU arena of its own registered just before."""
    session_options = _session_options(ort, options)
    if arena is None:
        return ort.InferenceSession(str(model_path), session_options, providers=providers)
    session_options.add_session_config_entry("session.use_env_allocators", "1")
    cpu = ort.OrtMemoryInfo(
        "Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT
    )
    with _shared_arena_lock:
        ort.create_and_register_allocator(cpu, ort.OrtArenaCfg(arena))
        return ort.InferenceSession(str(model_path), session_options, providers=providers)


def _memory_pool_note(
    options: SessionOptions, provider: str, index: int, arena: dict[str, int] | None
) -> str:
    ratio = options.memory_pool_ratio
    if ratio is None:
        return "arena on (ONNX Runtime's default)"
    pool = _pool_bytes(options, index)
    if arena is not None:
        return (
            f"CPU arena capped at {arena['max_mem'] / 2**20:.0f} MiB "
            f"(memory_pool_ratio={ratio} of the host's memory, grown as requested)"
        )
    if provider == "cuda" and pool:
        return (
            f"CUDA arena capped at {pool / 2**20:.0f} MiB "
            f"(gpu_mem_limit, memory_pool_ratio={ratio})"
        )
    if provider == "tensorrt" and pool:
        return (
            f"TensorRT workspace capped at {pool / 2**20:.0f} MiB "
            f"(trt_max_workspace_size, memory_pool_ratio={ratio})"
        )
    if provider in ("cuda", "tensorrt"):
        return f"memory_pool_ratio={ratio} not applied: the driver did not report the GPU's memory"
    if provider == "cann":
        return f"memory_pool_ratio={ratio} not applied: the NPU's memory size is not read here"
    return (
        f"arena on; memory_pool_ratio={ratio} not applied: the {provider} execution provider "
        "manages its own memory"
    )


def _ignored_options(options: SessionOptions, provider: str) -> dict[str, str]:
    ignored = {}
    if options.performance_hint:
        ignored["performance_hint"] = "ONNX Runtime has no performance hints"
    if options.streams:
        ignored["streams"] = "ONNX Runtime has no streams; use threads / inter_op_threads"
    if options.cache_dir and provider not in ("tensorrt", "openvino"):
        ignored["cache_dir"] = f"the {provider} execution provider compiles nothing to cache"
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
