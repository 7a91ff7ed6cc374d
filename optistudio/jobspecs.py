"""The spec of each job kind, validated when a job is submitted and again on the worker."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, ValidationError, model_validator

from core.benchmark import BenchmarkSpec
from core.compare import ComparisonSpec
from core.errors import InvalidSpec, describe_validation_error
from core.optimize import OptimizeSpec
from db.models import JobKind


class CompareJobSpec(ComparisonSpec):
    """An interleaved A/B comparison: the job's model is A (the baseline), this names B."""

    candidate_model_id: int = Field(description="Model B, measured against the job's model A.")

    def comparison(self) -> ComparisonSpec:
        return ComparisonSpec(**self.model_dump(exclude={"candidate_model_id"}))


class OptimizeJobSpec(OptimizeSpec):
    """An optimization run on the job's model, with the user's data files when given."""

    data_path: str | None = Field(
        default=None, description="Stored .npz of named input arrays for calibration/accuracy."
    )
    labels_path: str | None = Field(
        default=None, description="Stored labels (.npy or .csv) for top-1 accuracy."
    )

    @model_validator(mode="after")
    def _labels_need_data(self) -> OptimizeJobSpec:
        if self.labels_path and not self.data_path:
            raise ValueError("labels need a data file with the inputs they label")
        return self

    def optimize_spec(self) -> OptimizeSpec:
        return OptimizeSpec(**self.model_dump(exclude={"data_path", "labels_path"}))


SPEC_OF_KIND: dict[JobKind, type[BaseModel]] = {
    JobKind.benchmark: BenchmarkSpec,
    JobKind.compare: CompareJobSpec,
    JobKind.optimize: OptimizeJobSpec,
}


def parse_job_spec(kind: JobKind, spec: dict[str, Any]) -> Any:
    """The typed spec of a job, or InvalidSpec naming each bad field."""
    try:
        return SPEC_OF_KIND[kind].model_validate(spec)
    except ValidationError as exc:
        raise InvalidSpec(
            f"The {kind.value} settings are invalid: {describe_validation_error(exc)}"
        ) from None
