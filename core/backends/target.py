"""Where a model runs: one `RunTarget` value (backend, device, precision, threads, spin wait and
the ONNX Runtime provider options), and the field types every spec that runs a model shares.

A spec stores its where-it-runs fields flat, under RunTarget's names, and declares them with
these types (`backend: BackendName = "onnxruntime"`, `device: DeviceName = "cpu"`,
`threads: Threads = None`), so the validation and the help text live here once and a spec's
stored JSON keeps its keys and their order. `RunsOnTarget` reads those fields back as one
`RunTarget` (`spec.run_target`), and `RunTarget.session_options()` is the one place they become
the runtime's `SessionOptions`. A spec without a field runs at RunTarget's default for it; a
kind of run can pin a value whatever the spec says (two sessions in one process must not spin).
The input fields (shapes, dims) live in `optistudio.core.data.inputs`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.backends.base import Precision, SessionOptions

BackendName = Annotated[
    str,
    Field(
        min_length=1,
        description="Inference backend to run on (a registered name; `optistudio backends` "
        "lists them with their availability).",
    ),
]
DeviceName = Annotated[
    str, Field(min_length=1, description="Device of that backend, e.g. cpu or cuda:0.")
]
Threads = Annotated[
    int | None,
    Field(ge=1, le=256, description="Intra-op threads; empty = the runtime's default."),
]


class RunTarget(BaseModel):
    """Where and how one model runs: the backend, its device and the session's settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: BackendName = "onnxruntime"
    device: DeviceName = "cpu"
    precision: Precision = Field(
        default="fp32",
        description="Precision to run in (the backend refuses one it cannot run, naming those "
        "it can).",
    )
    threads: Threads = None
    spin_wait: bool = Field(
        default=True,
        description="Let idle runtime threads spin for new work (lower latency, but an idle "
        "session keeps burning CPU).",
    )
    execution_provider: str | None = Field(
        default=None,
        description="ONNX Runtime only: cpu, cuda, tensorrt, openvino, dnnl or cann; empty = the "
        "device's own.",
    )
    io_binding: bool = Field(
        default=False,
        description="ONNX Runtime only: keep inputs bound on the device (times the model "
        "without the host-to-device copy).",
    )

    def session_options(self) -> SessionOptions:
        """The runtime options of this target (every field but the backend, which loads it)."""
        return SessionOptions(**self.model_dump(exclude={"backend"}))


class RunsOnTarget(BaseModel):
    """A spec that runs a model: the RunTarget fields it stores, read back as one value.

    The spec declares the fields it stores (a subset of RunTarget's, by the same names); the
    others take RunTarget's defaults, and `pinned_target` fixes values for every spec of the
    kind (an A/B run's two sessions: `{"spin_wait": False}`).
    """

    pinned_target: ClassVar[Mapping[str, Any]] = {}

    @property
    def run_target(self) -> RunTarget:
        """Where this spec's model runs."""
        stored = type(self).model_fields
        own = {name: getattr(self, name) for name in RunTarget.model_fields if name in stored}
        return RunTarget(**{**own, **self.pinned_target})
