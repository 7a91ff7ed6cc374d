"""Do a backend's outputs agree with the reference (ONNX Runtime, FP32, CPU) on the same inputs?

Tolerances fit the precision: FP32 must agree to rounding, FP16 / BF16 to their mantissas, INT8
to what quantization allows. NaN or Inf in an output is always a failure. The inputs are the
benchmark's own synthetic (or given) feeds, so the check costs one extra reference run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.backends import SessionOptions, get_backend
from optistudio.core.numerics.accuracy import output_agreement


class Tolerance(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    min_cosine: float = Field(description="Worst per-sample cosine similarity allowed.")
    max_rel_error: float = Field(
        description="Largest absolute error allowed, as a share of the reference's largest value."
    )


TOLERANCES = {
    "fp32": Tolerance(min_cosine=0.99999, max_rel_error=1e-3),
    "fp16": Tolerance(min_cosine=0.999, max_rel_error=2e-2),
    "bf16": Tolerance(min_cosine=0.995, max_rel_error=5e-2),
    "int8": Tolerance(min_cosine=0.98, max_rel_error=0.25),
}
REFERENCE = "onnxruntime fp32 on cpu"


class OutputCheck(BaseModel):
    """The verdict on every output, with the figures and the tolerance it was held to."""

    model_config = ConfigDict(extra="forbid")

    passed: bool
    precision: str
    reference: str = REFERENCE
    tolerance: Tolerance
    outputs: dict[str, dict[str, float | bool]]
    problems: list[str]

    @property
    def summary(self) -> str:
        if self.passed:
            worst = min((o["cosine_min"] for o in self.outputs.values()), default=1.0)
            return f"outputs agree with {self.reference} (worst cosine {worst:.6f})"
        return "outputs disagree with the reference: " + "; ".join(self.problems)


def reference_outputs(model_path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The reference run: ONNX Runtime's CPU provider on the stored model, one thread pool."""
    model = get_backend("onnxruntime").load(model_path, SessionOptions(spin_wait=False))
    try:
        return model.run(feeds)
    finally:
        model.close()


def check_outputs(
    names: Sequence[str],
    reference: Sequence[np.ndarray],
    candidate: Sequence[np.ndarray],
    *,
    precision: str,
) -> OutputCheck:
    tolerance = TOLERANCES[precision]
    figures: dict[str, dict[str, float | bool]] = {}
    problems = []
    for name, ref, cand in zip(names, reference, candidate, strict=True):
        agreement = output_agreement(np.asarray(ref), np.asarray(cand))
        figures[name] = agreement
        if agreement["nan_inf"]:
            problems.append(f"{name} has NaN or Inf")
        elif float(agreement["cosine_min"]) < tolerance.min_cosine:
            problems.append(
                f"{name}: cosine {float(agreement['cosine_min']):.6f} < {tolerance.min_cosine}"
            )
        elif float(agreement["max_rel_error"]) > tolerance.max_rel_error:
            problems.append(
                f"{name}: max error {float(agreement['max_rel_error']):.2e} of the reference's "
                f"range > {tolerance.max_rel_error:.0e}"
            )
    return OutputCheck(
        passed=not problems,
        precision=precision,
        tolerance=tolerance,
        outputs=figures,
        problems=problems,
    )
