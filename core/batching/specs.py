"""Job specs of the batching tuner: a profile of the model, and a verification run."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from optistudio.core.backends.target import BackendName, DeviceName, RunsOnTarget, Threads
from optistudio.core.batching.settings import DEFAULT_MAX_BATCH_SIZE, BatchingSettings
from optistudio.core.data.model_inputs import ModelInputs


def _spin_wait_field() -> Any:
    return Field(
        default=False,
        description="Let ONNX Runtime's idle threads spin for work. Off by default: behind the "
        "Pipeline the serving threads share the cores, and spinning threads made the model's "
        "speed under load swing far more (docs/BENCHMARKS.md).",
    )


class LatencyProfileSpec(ModelInputs, RunsOnTarget):
    """Time the model at batch sizes 1, 2, 4, ... up to max_batch_size on one backend. Its
    shapes and inputs file are one request's (a batch stacks requests)."""

    model_config = ConfigDict(extra="forbid")

    backend: BackendName = "onnxruntime"
    device: DeviceName = "cpu"
    max_batch_size: int = Field(
        default=DEFAULT_MAX_BATCH_SIZE,
        ge=1,
        le=256,
        description="Largest batch to time: the largest max batch size the profile predicts.",
    )
    threads: Threads = None
    spin_wait: bool = _spin_wait_field()
    min_seconds: float = Field(
        default=0.5, gt=0, le=60, description="Least time spent timing each batch size."
    )
    probe_time_scale: float = Field(
        default=1.0,
        ge=0.05,
        le=1,
        description="Length of the serving probes as a share of their full length: 1 (full) "
        "by default; a quick profile's are shorter (QUICK_PROBE_SCALE), about a third of the "
        "time, with serving figures that rest on fewer requests.",
    )


class BatchingVerifySpec(ModelInputs, RunsOnTarget):
    """Serve the model with the real Pipeline under the load generator and measure. Its
    shapes and inputs file are one request's."""

    model_config = ConfigDict(extra="forbid")

    backend: BackendName = "onnxruntime"
    device: DeviceName = "cpu"
    settings: BatchingSettings = Field(default_factory=BatchingSettings)
    process: Literal["poisson", "constant", "closed"] = Field(
        default="poisson", description="Arrival process: Poisson, constant rate, closed loop."
    )
    rate: float | None = Field(
        default=None, gt=0, le=1_000_000, description="Arrivals per second (open loop)."
    )
    clients: int = Field(default=0, ge=0, le=1024, description="Concurrent clients (closed).")
    seconds: float = Field(default=10.0, gt=0, le=600, description="How long to send.")
    threads: Threads = None
    spin_wait: bool = _spin_wait_field()
    seed: int = Field(default=0, description="Seed of the arrival times.")
    profile_job: int | None = Field(
        default=None,
        ge=1,
        description="The profile job whose prediction this run checks and refits (empty: the "
        "model's newest).",
    )

    @model_validator(mode="after")
    def _load_defined(self) -> BatchingVerifySpec:
        if self.process == "closed" and self.clients < 1:
            raise ValueError("a closed loop needs at least one client")
        if self.process != "closed" and self.rate is None:
            raise ValueError("an open loop needs an arrival rate")
        return self
