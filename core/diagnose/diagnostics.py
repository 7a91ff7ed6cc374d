"""One diagnostics run: profile a model (and a variant), compare, explain INT8, per-layer error.

This is what the operator profile job and `optistudio operator-profile` call. With a variant:
both are profiled on the same backend and batch, compared by op family, and whichever of the two
is quantized is explained (the other is its float reference); per-layer error compares the float
one with the quantized one on the given data (synthetic inputs without data, which the report
says).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.data.images import ImagePreprocessing
from optistudio.core.data.source import CalibrationSource
from optistudio.core.diagnose.explain_int8 import Finding, explain_int8
from optistudio.core.diagnose.layer_report import layer_error_rows
from optistudio.core.diagnose.operator_profile import (
    OperatorProfile,
    OperatorProfileSpec,
    measure_operator_profile,
)
from optistudio.core.diagnose.profile_compare import ProfileComparison, compare_profiles
from optistudio.core.errors import OptistudioError
from optistudio.core.measure.stages import Breakdown, PipelineSpec, PostStep, layered_breakdown
from optistudio.core.model.intake import inspect_model
from optistudio.core.progress import ProgressCallback, ignore_progress


class DiagnosticsSpec(OperatorProfileSpec):
    """A profile, and the pipeline around the model whose stages are timed."""

    image_preprocessing: ImagePreprocessing | None = Field(
        default=None, description="Image pre-processing to time before the model (images only)."
    )
    postprocessing: list[PostStep] = Field(
        default_factory=list, description="Post-processing steps to time on the first output."
    )
    layer_error_batches: int = Field(
        default=4, ge=1, le=64, description="Batches compared for the per-layer error."
    )

    def profile_spec(self) -> OperatorProfileSpec:
        return OperatorProfileSpec(**self.model_dump(include=set(OperatorProfileSpec.model_fields)))

    def pipeline(self, images: str | None = None) -> PipelineSpec:
        return PipelineSpec(
            backend=self.backend,
            batch_size=self.batch_size,
            runs=min(self.runs, 50),
            image_preprocessing=self.image_preprocessing,
            images=images,
            postprocessing=self.postprocessing,
            threads=self.threads,
            **self.model_inputs.model_dump(),
        )


class DiagnosticsReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    profile: OperatorProfile
    variant: OperatorProfile | None = None
    comparison: ProfileComparison | None = None
    explained: str | None = Field(default=None, description="File name the findings are about.")
    findings: list[Finding] = Field(default_factory=list)
    layer_errors: list[dict[str, Any]] = Field(default_factory=list)
    layer_error_note: str = ""
    breakdown: Breakdown | None = None
    notes: list[str] = Field(default_factory=list)


def diagnose(
    model: Path,
    spec: DiagnosticsSpec,
    *,
    work_dir: Path,
    variant: Path | None = None,
    data: CalibrationSource | None = None,
    images: str | None = None,
    names: tuple[str, str] | None = None,
    progress: ProgressCallback | None = None,
) -> DiagnosticsReport:
    """Profile `model` (and `variant`), compare and explain; see the module docstring.

    `names` label the model and the variant in the report (default: their file names)."""
    report_progress = progress or ignore_progress
    report_progress(0.0, f"Profiling {model.name} on {spec.backend}")
    report = DiagnosticsReport(
        profile=measure_operator_profile(model, spec.profile_spec(), work_dir=work_dir / "a")
    )
    if names:
        report.profile.model = names[0]
    if variant is not None:
        report_progress(0.3, f"Profiling {variant.name}")
        report.variant = measure_operator_profile(
            variant, spec.profile_spec(), work_dir=work_dir / "b"
        )
        if names:
            report.variant.model = names[1]
        report.comparison = compare_profiles(report.profile, report.variant)
    report_progress(0.55, "Explaining INT8")
    _explain(report, model, variant)
    report_progress(0.65, "Per-layer quantization error")
    _layer_errors(report, model, variant, spec, data, work_dir)
    report_progress(0.85, "Timing the pipeline stages")
    report.breakdown = layered_breakdown(model, spec.pipeline(images), work_dir=work_dir / "stages")
    report_progress(1.0, "Done")
    return report


def _explain(report: DiagnosticsReport, model: Path, variant: Path | None) -> None:
    quantized = [
        (path, profile)
        for path, profile in ((variant, report.variant), (model, report.profile))
        if path is not None and profile is not None and profile.quantized
    ]
    if not quantized:
        report.notes.append(
            "No quantized model here, so there is no INT8 to explain: give an INT8 variant."
        )
        return
    path, profile = quantized[0]
    comparison = report.comparison if path == variant else None
    report.explained = profile.model
    report.findings = explain_int8(path, profile=profile, comparison=comparison)


def _layer_errors(
    report: DiagnosticsReport,
    model: Path,
    variant: Path | None,
    spec: DiagnosticsSpec,
    data: CalibrationSource | None,
    work_dir: Path,
) -> None:
    if variant is None or report.variant is None:
        report.layer_error_note = "Per-layer error needs a float model and its quantized variant."
        return
    pair = (model, variant) if report.variant.quantized else (variant, model)
    if report.variant.quantized == report.profile.quantized:
        report.layer_error_note = "Per-layer error needs one float and one quantized model."
        return
    inputs = inspect_model(pair[0]).inputs
    source = data or spec.dataset(inputs, samples=8 * spec.batch_size, batch_size=spec.batch_size)
    try:
        report.layer_errors = layer_error_rows(
            *pair, source, work_dir=work_dir / "layers", max_batches=spec.layer_error_batches
        )
    except OptistudioError as exc:
        report.layer_error_note = f"Per-layer error could not be computed: {exc}"
        return
    report.layer_error_note = f"Compared on {source.description}." + (
        " Synthetic inputs show where quantization adds noise, not your data's accuracy."
        if getattr(source, "synthetic", False)
        else ""
    )
