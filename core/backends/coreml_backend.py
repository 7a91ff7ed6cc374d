"""Core ML: listed so the inventory and the studio can say where its packages run; never run here.

Optistudio exports Core ML packages (`coreml/` in the export bundle, made by
`optistudio.core.report.coreml`) but runs no Core ML model: Core ML exists only on macOS / iOS,
and no worker of this project measures on a Mac yet (docs/DEPLOYMENT.md says how one would be
attached). So the backend is always unavailable, with the reason, and refuses every load.
"""

from __future__ import annotations

import platform
from pathlib import Path

from optistudio.core.backends.base import (
    Availability,
    InferenceBackend,
    LoadedModel,
    SessionOptions,
)
from optistudio.core.errors import BackendUnavailable

RUNS_ON = "runs on macOS / iOS only — not run here"
"""Where a Core ML package runs, as the bundle, the inventory and the studio say it."""
EXPORT_NOTE = "the export bundle's coreml/ holds .mlpackage files (FP32, FP16, INT8 weights)"


def unavailable_reason() -> str:
    """Why Core ML cannot run here, in one sentence."""
    if platform.system() == "Darwin":
        return (
            "Core ML models are exported, not run, by Optistudio: "
            f"{EXPORT_NOTE}; open them in Xcode or with coremltools on this Mac."
        )
    return f"Core ML {RUNS_ON}: {EXPORT_NOTE}."


class CoreMLBackend(InferenceBackend):
    name = "coreml"

    def availability(self) -> Availability:
        return Availability(ok=False, reason=unavailable_reason())

    def load(self, model_path: Path, options: SessionOptions) -> LoadedModel:
        raise BackendUnavailable(
            unavailable_reason(),
            hint="Export a bundle (optistudio export MODEL_ID --out bundle.zip) and run its "
            "coreml/ package on a Mac or an iPhone.",
        )
