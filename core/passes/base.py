"""The pass contract: a registered, typed, documented step from one ONNX file to another.

A pass is known by a `PassInfo` registered through the `optistudio.passes` entry-point group.
`config` and `implementation` name a pydantic config class and a run function ('module:attr');
modules keep heavy imports (onnxruntime.quantization, onnxscript, nncf) inside their functions, so
listing passes and rendering their forms stays cheap.

A run function has the signature

    run(model: Path, out: Path, config: <ConfigClass>, context: PassContext) -> PassReport

It writes its result to `out` (a new file; never edits `model`), reports progress through the
context, and raises optistudio.core.errors.PassFailed (with a message for people) when the model cannot be
handled by this pass; any other exception is a bug.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.data.source import CalibrationSource
from optistudio.core.errors import PassFailed
from optistudio.core.loader import load
from optistudio.core.passes.judging import VariantJudge
from optistudio.core.progress import ProgressCallback, ignore_progress
from optistudio.core.registry import Registry


@dataclass
class PassContext:
    """What a pass may use besides its config."""

    work_dir: Path
    target_backend: str = "onnxruntime"
    calibration: CalibrationSource | None = None
    progress: ProgressCallback = ignore_progress
    judge: VariantJudge | None = None
    """How the run judges its variants, for a pass that searches until that judge passes
    (optistudio.core.passes.judging); None outside an optimization run."""

    def require_calibration(self, what: str) -> CalibrationSource:
        """The calibration data, or PassFailed saying that `what` needs some."""
        if self.calibration is None:
            raise PassFailed(
                f"{what} needs calibration data: a few hundred representative inputs.",
                hint="Attach a calibration dataset, or use int8_dynamic, which needs none.",
            )
        return self.calibration


class PassReport(BaseModel):
    """What a pass did: its output file and pass-specific details for the report."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    output: Path
    details: dict[str, Any] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)


class PassInfo(BaseModel):
    """What the UI and the registry know about a pass without running it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Stable lowercase name stored in recipes and the database.")
    label: str
    description: str
    config: str = Field(description="'module:Class' of the pass's pydantic config.")
    implementation: str = Field(description="'module:function' that runs the pass.")
    needs_calibration: bool = False
    produces_precision: str = Field(default="fp32", description="fp32, fp16, int8 or mixed.")
    changes_outputs: bool = Field(
        default=False,
        description="The pass is there to change the declared outputs (free-dims, dynamic "
        "batch); every other pass's file declares the outputs its input declares.",
    )

    def config_class(self) -> type[BaseModel]:
        config: type[BaseModel] = load(self.config)
        return config

    def run(
        self, model: Path, out: Path, config: BaseModel | dict[str, Any], context: PassContext
    ) -> PassReport:
        typed = self.config_class().model_validate(config)
        report: PassReport = load(self.implementation)(model, out, typed, context)
        return report


passes: Registry[PassInfo] = Registry("pass", "optistudio.passes")
