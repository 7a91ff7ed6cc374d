"""Do a backend's outputs agree with the reference (ONNX Runtime, FP32, CPU) on the same inputs?

The tolerance is the precision's rule (`optistudio.core.numerics.tolerances`, the one optimize's
judge holds its variants to): every output's worst-sample SNR against the reference's at least
the rule's floor (FP32 to rounding, FP16 / BF16 to their mantissas, INT8 to what quantization
allows), the worst cosine shown beside it. NaN or Inf in an output is always a failure. The
inputs are the benchmark's own synthetic (or given) feeds, so the check costs one extra
reference run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.backends import SessionOptions, get_backend
from optistudio.core.numerics.accuracy import output_agreement
from optistudio.core.numerics.numeric_floor import FloorTally
from optistudio.core.numerics.tolerances import PrecisionRule, rule_for


class Tolerance(BaseModel):
    """The tolerance of checks stored before the precision rules (a cosine and an error)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_cosine: float = Field(description="Worst per-sample cosine similarity allowed.")
    max_rel_error: float = Field(
        description="Largest absolute error allowed, as a share of the reference's largest value."
    )


REFERENCE = "onnxruntime fp32 on cpu"


class OutputCheck(BaseModel):
    """The verdict on every output, with the figures and the tolerance it was held to."""

    model_config = ConfigDict(extra="forbid")

    passed: bool
    precision: str
    reference: str = REFERENCE
    tolerance: PrecisionRule | Tolerance
    outputs: dict[str, dict[str, float | bool]]
    problems: list[str]

    @property
    def summary(self) -> str:
        rule = self.tolerance
        within = f" within {rule.line()}" if isinstance(rule, PrecisionRule) else ""
        if self.passed:
            worst = min((o["cosine_min"] for o in self.outputs.values()), default=1.0)
            return f"outputs agree with {self.reference}{within} (worst cosine {worst:.6f})"
        return f"outputs disagree with {self.reference}{within}: " + "; ".join(self.problems)

    def verdict(self) -> str:
        """'agree within the BF16 rule: worst-sample SNR >= 15 dB on every output (lowest
        31.2 dB, worst cosine 0.99951)', or 'DISAGREE (the BF16 rule: ...): ' and the problems."""
        rule = self.tolerance
        said = rule.line() if isinstance(rule, PrecisionRule) else f"{self.precision} tolerance"
        if not self.passed:
            return f"DISAGREE ({said}): " + "; ".join(self.problems)
        snrs = [float(o["worst_snr_db"]) for o in self.outputs.values() if "worst_snr_db" in o]
        worst = min((float(o["cosine_min"]) for o in self.outputs.values()), default=1.0)
        lowest = f"lowest {min(snrs):.1f} dB, " if snrs else ""
        return f"agree within {said} ({lowest}worst cosine {worst:.6f})"


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
    """Each output against the reference's, held to the precision's rule."""
    rule = rule_for(precision)
    figures: dict[str, dict[str, float | bool]] = {}
    problems = []
    for name, ref, cand in zip(names, reference, candidate, strict=True):
        agreement = output_agreement(np.asarray(ref), np.asarray(cand))
        snr = _worst_snr(np.asarray(ref), np.asarray(cand))
        figures[name] = agreement | ({"worst_snr_db": snr} if snr is not None else {})
        if agreement["nan_inf"]:
            problems.append(f"{name} has NaN or Inf")
        elif snr is None:
            problems.append(f"{name} is zero in the reference everywhere, and not in this run")
        elif snr < rule.min_snr_db:
            problems.append(
                f"{name}: worst-sample SNR {snr:.1f} dB < {rule.min_snr_db:g} dB ({rule.name}; "
                f"worst cosine {float(agreement['cosine_min']):.4f})"
            )
    return OutputCheck(
        passed=not problems,
        precision=precision,
        tolerance=rule,
        outputs=figures,
        problems=problems,
    )


def _worst_snr(reference: np.ndarray, candidate: np.ndarray) -> float | None:
    """The worst-sample SNR (dB) of one output, as the numeric floor measures it."""
    rows = reference.shape[0] if reference.ndim else 1
    tally = FloorTally()
    tally.add(
        "output",
        reference.astype(np.float64).reshape(rows, -1),
        candidate.astype(np.float64).reshape(rows, -1),
        floating=True,
    )
    return tally.floors()["output"].worst_snr_db
