"""One recipe's outcome in an optimization run (`VariantResult`): made, with its file and its
figures; failed, with its error; or not applicable, with the sentence that says why (ONNX
Runtime's quantizer cannot take this graph, or the variant's backend cannot load it), listed
apart from failures: the recipe does not fit this model, nothing went wrong. Its own module so
that what reads variants (the headline, the notes) needs nothing of the run that makes them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from optistudio.core.errors import ErrorCode, ErrorInfo
from optistudio.core.measure.compare import Verdict
from optistudio.core.numerics.accuracy import AccuracyReport
from optistudio.core.optimize.decoder_timing import DecoderFigures
from optistudio.core.optimize.recipes import REFERENCE_BACKEND, Recipe

VariantStatus = Literal["made", "failed", "not_applicable"]
BuiltinUse = Literal["calibrated and judged", "judged"]
"""What a variant did on the built-in samples (optistudio.core.data.builtin)."""


class StepReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: str
    details: dict[str, Any]
    warnings: list[str]


class VariantResult(BaseModel):
    """One recipe's outcome: made (its file and figures) or failed (its error, no file)."""

    model_config = ConfigDict(extra="forbid")

    recipe: Recipe
    status: VariantStatus = Field(
        default="made",
        description="made: the file was checked and timed; failed: `error` says why (no "
        "file); not_applicable: the recipe does not apply to this graph, or its backend cannot "
        "load the variant, `error` says why (no file).",
    )
    precision: str
    backend: str = Field(default=REFERENCE_BACKEND, description="Where it was checked and timed.")
    path: str | None = None
    steps: list[StepReport] = Field(default_factory=list)
    accuracy: AccuracyReport | None = None
    within_budget: bool = False
    budget_note: str = ""
    calibrated_on_random: bool = Field(
        default=False,
        description="Calibrated on synthetic (random) inputs: its INT8 ranges may not fit real "
        "data, so Auto leaves it unless the run is speed-only.",
    )
    builtin_samples: BuiltinUse | None = Field(
        default=None,
        description="Calibrated and judged, or only judged, on the built-in samples (real "
        "photographs, text, audio... made on the fly), not the user's data; None: on the "
        "user's data or on random inputs.",
    )
    ratio: float | None = Field(default=None, description="Variant / original latency (median).")
    ratio_low: float | None = None
    ratio_high: float | None = None
    verdict: Verdict | None = Field(
        default=None, description="Faster, slower or no significant difference; None untimed."
    )
    speedup: float | None = Field(default=None, description="1 / ratio.")
    original_p50_ms: float | None = None
    variant_p50_ms: float | None = None
    timing_note: str = Field(
        default="",
        description="When its first interval straddled the threshold Auto needs, what more "
        "rounds said: 'resolved after 12 more rounds ...: faster' or 'still unresolved after "
        "the 20 s cap (...)' (optistudio.core.optimize.unsteady); '' when none were timed.",
    )
    decoding: DecoderFigures | None = Field(
        default=None,
        description="A decoder's figures next to its FP32 original's: TTFT, tokens/s at batch "
        "1 (and at N), sizes on disk; None for any other model. Its ranked figure is `ratio`.",
    )
    error: ErrorInfo | None = Field(
        default=None, description="Why the recipe failed (code, message, hint); None if made."
    )

    @model_validator(mode="before")
    @classmethod
    def _status_from_error(cls, data: Any) -> Any:
        """Results stored before variants had a status: the failed ones had an error."""
        if isinstance(data, dict) and "status" not in data:
            return data | {"status": "failed" if data.get("error") else "made"}
        return data

    @field_validator("verdict", mode="before")
    @classmethod
    def _untimed_was_empty(cls, value: Any) -> Any:
        return value or None  # results stored before verdicts were a Literal said "" untimed

    @field_validator("error", mode="before")
    @classmethod
    def _error_was_text(cls, value: Any) -> Any:
        """Results stored before errors had fields held one line (message and hint)."""
        return {"code": "failed", "message": value} if isinstance(value, str) else value

    @property
    def judged(self) -> bool:
        """Made, judged against the budget and timed: only such a variant can miss the budget
        (one that failed outright was never measured)."""
        return self.status == "made" and self.accuracy is not None and self.verdict is not None

    @property
    def unchecked_builtin(self) -> bool:
        """Calibrated on the built-in samples but judged by no task (output cosine and top-1
        only): Auto leaves it, as nothing the user's task cares for was checked."""
        calibrated = self.builtin_samples == "calibrated and judged"
        return calibrated and (self.accuracy is None or self.accuracy.task is None)

    def samples_note(self) -> str:
        """'calibrated and judged on built-in samples, not your data', or '' on the user's."""
        if self.builtin_samples is None:
            return ""
        return f"{self.builtin_samples} on built-in samples, not your data"

    def fail(self, error: ErrorInfo) -> None:
        """Mark the variant failed with `error`; a failed variant has no file."""
        self.status, self.error, self.path = "failed", error, None

    def set_aside(self, error: ErrorInfo) -> None:
        """Mark the variant not applicable, `error` saying why; it has no file either."""
        self.status, self.error, self.path = "not_applicable", error, None

    def not_applicable_where(self) -> str:
        """'on openvino' (its backend could not load it) or 'to this graph' (the passes)."""
        loading = self.error is not None and self.error.code == ErrorCode.model_load_failed
        return f"on {self.backend}" if loading else "to this graph"

    def why_not_applicable(self) -> str:
        """'not applicable on openvino: OpenVINO could not load this model: ...'."""
        message = self.error.message if self.error else "no reason kept"
        prefix = "Not applicable to this graph: "
        return f"not applicable {self.not_applicable_where()}: {message.removeprefix(prefix)}"
