"""The spec of each job kind, validated when a job is submitted and again on the worker."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from optistudio.core.batching.specs import BatchingProfileSpec, BatchingVerifySpec
from optistudio.core.data.datasets import load_labels, open_dataset
from optistudio.core.data.images import ImagePreprocessing
from optistudio.core.diagnose.diagnostics import DiagnosticsSpec
from optistudio.core.errors import InvalidSpec, describe_validation_error
from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.core.measure.compare import ComparisonSpec
from optistudio.core.measure.soak import SoakSpec
from optistudio.core.model.info import TensorSpec
from optistudio.core.optimize.run import OptimizeSpec
from optistudio.db.models import JobKind
from optistudio.services.artifact_store import local_data_file


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
    image_preprocessing: ImagePreprocessing | None = Field(
        default=None,
        description="How images are turned into inputs when the data is a folder or .zip.",
    )

    @model_validator(mode="after")
    def _labels_need_data(self) -> OptimizeJobSpec:
        if self.labels_path and not self.data_path:
            raise ValueError("labels need a data file with the inputs they label")
        return self

    def optimize_spec(self) -> OptimizeSpec:
        excluded = {"data_path", "labels_path", "image_preprocessing"}
        return OptimizeSpec(**self.model_dump(exclude=excluded))

    def open_data(self, inputs: list[TensorSpec]) -> tuple[Any, Any]:
        """The dataset (.npz, image folder or zip) and labels this job names, validated."""
        if not self.data_path:
            return None, None
        data_path = local_data_file(self.data_path)  # from the artifact store on this worker
        data = open_dataset(data_path, inputs, preprocessing=self.image_preprocessing)
        labels = (
            load_labels(local_data_file(self.labels_path), samples=len(data))
            if self.labels_path
            else None
        )
        return data, labels


class ProfileJobSpec(DiagnosticsSpec):
    """A profile of the job's model; with a variant, comparison, INT8 explainer, layer error."""

    variant_model_id: int | None = Field(
        default=None, description="A variant (e.g. INT8) profiled and compared with the model."
    )
    data_path: str | None = Field(
        default=None, description="Stored .npz of named input arrays for the per-layer error."
    )
    images_path: str | None = Field(
        default=None, description="Stored folder or .zip of images for the pre-processing stage."
    )


class ExportJobSpec(BaseModel):
    """A deployable bundle of the job's model; it takes no settings (the bundle is complete)."""

    model_config = ConfigDict(extra="forbid")


SPEC_OF_KIND: dict[JobKind, type[BaseModel]] = {
    JobKind.benchmark: BenchmarkSpec,
    JobKind.compare: CompareJobSpec,
    JobKind.optimize: OptimizeJobSpec,
    JobKind.profile: ProfileJobSpec,
    JobKind.soak: SoakSpec,
    JobKind.batching_profile: BatchingProfileSpec,
    JobKind.batching_verify: BatchingVerifySpec,
    JobKind.export: ExportJobSpec,
}


def parse_job_spec(kind: JobKind, spec: dict[str, Any]) -> Any:
    """The typed spec of a job, or InvalidSpec naming each bad field."""
    try:
        return SPEC_OF_KIND[kind].model_validate(spec)
    except ValidationError as exc:
        raise InvalidSpec(
            f"The {kind.value} settings are invalid: {describe_validation_error(exc)}"
        ) from None
