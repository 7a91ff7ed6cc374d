"""The operator-fusion pass: registered fusion patterns, in order, then a numerical check.

This module declares the pass and its config; `optistudio.core.passes.fusion_run` runs it. They
are apart so that the rewriter (onnxscript) and ONNX Runtime are imported only when the pass
runs, not when the passes are listed or their forms rendered.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.passes.base import PassInfo


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
    implementation="optistudio.core.passes.fusion_run:run_fusion",
)
