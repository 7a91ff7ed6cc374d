"""Running the operator-fusion pass declared in `optistudio.core.passes.fusion`.

Importing this module loads the rewriter (onnxscript) and ONNX Runtime; the pass registry
imports it only when the pass runs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from optistudio.core.data.inputs import synthesize_inputs
from optistudio.core.fusion.apply import apply_fusions, numerical_check
from optistudio.core.fusion.registry import fusion_patterns
from optistudio.core.model.intake import inspect_model
from optistudio.core.passes.base import PassContext, PassReport
from optistudio.core.passes.fusion import FusionConfig


def _check_feeds(model: Path, context: PassContext) -> tuple[dict[str, Any], list[str]]:
    """The first calibration batch when there is data (real shapes), else synthetic inputs."""
    if context.calibration is not None:
        first = next(iter(context.calibration.batches()), None)
        if first is not None:
            return first, []
    specs = inspect_model(model, max_bytes=sys.maxsize).inputs
    return synthesize_inputs(specs, batch_size=1)


def run_fusion(model: Path, out: Path, config: FusionConfig, context: PassContext) -> PassReport:
    """Fuse, then compare the outputs on synthetic batch-1 inputs; raises PassFailed on drift."""
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
    if config.patterns is not None:
        return config.patterns
    return [info.name for info in sorted(fusion_patterns, key=lambda info: info.default_order)]
