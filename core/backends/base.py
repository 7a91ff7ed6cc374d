"""One interface for every inference runtime.

A backend is known by a `BackendSpec` (name, label, capabilities) registered through the
`optistudio.backends` entry-point group. The spec names the module that implements it; that
module (and the runtime it wraps) is imported only when the backend is used, so listing backends
never loads TensorRT or OpenVINO.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from optistudio.core.errors import InvalidSpec
from optistudio.core.loader import load
from optistudio.core.registry import Registry

Precision = Literal["fp32", "fp16", "bf16", "int8"]
PerformanceHint = Literal["latency", "throughput"]


class DeviceType(str, Enum):
    """The device kinds backends list: `InferenceBackend.create(DeviceType.CPU)`. A device is
    also given as text, in any case ('CPU', 'cpu', 'cuda:0'); `SessionOptions` keeps it in
    lower case."""

    CPU = "cpu"
    CUDA = "cuda"
    GPU = "gpu"
    NPU = "npu"
    ANE = "ane"

    def __str__(self) -> str:
        return self.value


def device_name(device: DeviceType | str) -> str:
    """'cpu', 'cuda:0', ...: a DeviceType's value, or the text stripped and in lower case."""
    return device.value if isinstance(device, DeviceType) else str(device).strip().lower()


def named_feeds(inputs: Mapping[str, Any] | Any, names: list[str]) -> dict[str, np.ndarray]:
    """Arrays by input name: a mapping as it is, a bare array for a model with one input
    (`names`: the model's inputs, in order). InvalidSpec when a bare array meets several."""
    if isinstance(inputs, Mapping):
        return {name: np.asarray(value) for name, value in inputs.items()}
    if len(names) == 1:
        return {names[0]: np.asarray(inputs)}
    raise InvalidSpec(
        f"This model has {len(names)} inputs ({', '.join(names) or 'none known'}), so one array "
        "cannot say which it feeds.",
        hint="Pass a dict of arrays by input name, e.g. predict({'"
        + (names[0] if names else "x")
        + "': array, ...}).",
    )


class Availability(BaseModel):
    """Whether a backend can run here, and if not, why (in words a user understands)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ok: bool
    reason: str = ""
    devices: list[str] = Field(default_factory=list)
    versions: dict[str, str] = Field(default_factory=dict)
    precisions: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Device kind -> the precisions that can run there (empty: the spec's list).",
    )


class SessionOptions(BaseModel):
    """Typed runtime options shared by every backend; each maps them to its own knobs."""

    model_config = ConfigDict(extra="forbid")

    device: str = Field(
        default="cpu", description="Device to run on, e.g. 'cpu' or 'cuda:0' (any case)."
    )
    threads: int | None = Field(
        default=None,
        ge=1,
        le=256,
        description="Intra-op threads. Empty means the runtime's default (all physical cores).",
    )
    inter_op_threads: int | None = Field(
        default=None, ge=1, le=256, description="Inter-op threads for parallel graph branches."
    )
    spin_wait: bool = Field(
        default=True,
        description="Let idle worker threads spin for new work (lower latency, but an idle "
        "session keeps burning CPU). Off when two sessions share a process, as in A/B runs.",
    )
    precision: Precision = Field(
        default="fp32",
        description="Inference precision to request. 'int8' runs a quantized (QDQ/NNCF) model "
        "as it is. A backend that cannot run it refuses with the precisions it can.",
    )
    performance_hint: PerformanceHint | None = Field(
        default=None,
        description="Tune for one request at a time ('latency') or many in parallel "
        "('throughput'). Empty means the runtime's default.",
    )
    streams: int | None = Field(
        default=None,
        ge=1,
        le=256,
        description="Parallel inference streams (OpenVINO NUM_STREAMS). Empty means the "
        "runtime's choice for the hint.",
    )
    memory_pool_ratio: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="Share of the device's memory a session may pool (0 < r <= 1), mapped to "
        "each runtime's own knob; the details say what was applied. Empty means the default.",
    )
    cache_dir: str | None = Field(
        default=None,
        description="Folder for compiled models / engines, so a second load skips compilation.",
    )
    execution_provider: str | None = Field(
        default=None,
        description="ONNX Runtime only: the execution provider (cpu, cuda, tensorrt, openvino, "
        "dnnl). Empty means the device's own: cpu on 'cpu', cuda on 'cuda:N'.",
    )
    io_binding: bool = Field(
        default=False,
        description="ONNX Runtime only: bind inputs and outputs to the device, so a repeated "
        "input is copied to the GPU once instead of on every run.",
    )

    @field_validator("device", mode="before")
    @classmethod
    def _device_in_lower_case(cls, device: Any) -> Any:
        """'CPU', DeviceType.CPU and 'cpu' are one device."""
        return device_name(device) if isinstance(device, (str, DeviceType)) else device


class BackendSpec(BaseModel):
    """What the UI and the registry know about a backend without importing it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Stable lowercase name stored in the database.")
    label: str
    description: str
    devices: list[str] = Field(description="Device kinds it can target.")
    precisions: list[str]
    implementation: str = Field(description="'module:Class' of the InferenceBackend.")

    def create(self) -> InferenceBackend:
        backend: InferenceBackend = load(self.implementation)()
        return backend


class LoadedModel(ABC):
    """A model ready to run on one backend and device."""

    details: dict[str, Any]
    """What the runtime really did (e.g. the execution providers it used), for the record."""

    @abstractmethod
    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run one inference; blocks until the outputs are ready."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release runtime resources."""


class InferenceBackend(ABC):
    """Loads models for one runtime."""

    name: str

    @abstractmethod
    def availability(self) -> Availability:
        """Whether the runtime is importable and has a usable device."""

    @abstractmethod
    def load(self, model_path: Path, options: SessionOptions) -> LoadedModel:
        """Load a model; raise ModelLoadError with the runtime's reason when it cannot."""


backends: Registry[BackendSpec] = Registry("backend", "optistudio.backends")


def get_backend(name: str) -> InferenceBackend:
    """Instantiate the backend registered under `name` (UnknownName lists the valid ones)."""
    return backends.get(name).create()
