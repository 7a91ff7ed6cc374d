"""The spec of each job kind, validated when a job is submitted and again on the worker."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, ValidationError

from core.benchmark import BenchmarkSpec
from core.compare import ComparisonSpec
from core.errors import InvalidSpec, describe_validation_error
from db.models import JobKind


class CompareJobSpec(ComparisonSpec):
    """An interleaved A/B comparison: the job's model is A (the baseline), this names B."""

    candidate_model_id: int = Field(description="Model B, measured against the job's model A.")

    def comparison(self) -> ComparisonSpec:
        return ComparisonSpec(**self.model_dump(exclude={"candidate_model_id"}))


SPEC_OF_KIND: dict[JobKind, type[BaseModel]] = {
    JobKind.benchmark: BenchmarkSpec,
    JobKind.compare: CompareJobSpec,
}


def parse_job_spec(kind: JobKind, spec: dict[str, Any]) -> Any:
    """The typed spec of a job, or InvalidSpec naming each bad field."""
    try:
        return SPEC_OF_KIND[kind].model_validate(spec)
    except ValidationError as exc:
        raise InvalidSpec(
            f"The {kind.value} settings are invalid: {describe_validation_error(exc)}"
        ) from None
