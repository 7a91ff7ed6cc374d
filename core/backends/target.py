"""The fields every spec that runs a model shares: which backend, which device, how many threads.

Specs declare them as `backend: BackendName = "onnxruntime"`, `device: DeviceName = "cpu"`,
`threads: Threads = None`, so the validation and the help text live here once and a spec's
stored JSON keeps its field order. The input fields (shapes, dims) live in
`optistudio.core.data.inputs`.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

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
