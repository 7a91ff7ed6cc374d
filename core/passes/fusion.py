"""The operator-fusion pass: registered fusion patterns, in order, then a numerical check.

The rewriter (onnxscript) and ONNX Runtime are imported only when the pass runs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from optistudio.core.passes.base import PassContext, PassInfo, PassReport
from pydantic import BaseModel, ConfigDict, Field


class FusionConfig(BaseModel):
    """Which fusion patterns to apply, and how close the fused model's outputs must stay."""

    model_config = ConfigDict(extra="forbid")

    patterns: list[str] | None = Field(
        default=None,
        description=(
            "Fusion patterns to apply, in this order. Empty: none. Unset: every registered "
            "pattern by its default order; those without a kernel on the target are skipped."
        ),
    )
    check_tolerance: float = Field(
        default=1e-4,
        gt=0,
        description=(
            "Largest absolute difference allowed between the outputs before and after fusion "
            "on synthetic inputs (plus a relative 1e-3 of the original value)."
        ),
    )


def _check_feeds(model: Path, context: PassContext) -> tuple[dict[str, Any], list[str]]:
    """The first calibration batch when there is data (real shapes), else synthetic inputs."""
    from optistudio.core.data.inputs import synthesize_inputs
    from optistudio.core.model.intake import inspect_model

    if context.calibration is not None:
        first = next(iter(context.calibration.batches()), None)
        if first is not None:
            return first, []
    specs = inspect_model(model, max_bytes=sys.maxsize).inputs
    return synthesize_inputs(specs, batch_size=1)


def run_fusion(model: Path, out: Path, config: FusionConfig, context: PassContext) -> PassReport:
    """Fuse, then compare the outputs on synthetic batch-1 inputs; raises PassFailed on drift."""
    from optistudio.core.fusion.apply import apply_fusions, numerical_check

    context.progress(0.0, "Applying fusion patterns")
    result = apply_fusions(
        model, out, names=_pattern_names(config), target_backend=context.target_backend
    )
    context.progress(0.6, "Comparing outputs before and after fusion")
    feeds, warnings = _check_feeds(model, context)
    max_abs_diff = numerical_check(model, out, feeds=feeds, atol=config.check_tolerance)
    context.progress(1.0, f"Fused {sum(result.matches.values())} pattern instance(s)")
    details = {
        "matches": result.matches,
        "skipped": result.skipped,
        "refused": result.refused,
        "max_abs_diff": max_abs_diff,
    }
    return PassReport(output=result.output, details=details, warnings=warnings)


def _pattern_names(config: FusionConfig) -> list[str]:
    from optistudio.core.fusion.registry import fusion_patterns

    if config.patterns is not None:
        return config.patterns
    return [info.name for info in sorted(fusion_patterns, key=lambda info: info.default_order)]


FUSION = PassInfo(
    name="fusion",
    label="Operator fusion",
    description=(
        "Rewrites chains of operators into fewer, fused ones: BatchNormalization folded into "
        "Conv, Conv+Relu/Clip into ONNX Runtime's FusedConv, MatMul+Add into Gemm, and "
        "back-to-back Transposes or Reshapes merged. Fewer nodes mean fewer passes over memory. "
        "Patterns run in an explicit order; the fused model's outputs are checked against the "
        "original's on synthetic inputs."
    ),
    config="optistudio.core.passes.fusion:FusionConfig",
    implementation="optistudio.core.passes.fusion:run_fusion",
)
