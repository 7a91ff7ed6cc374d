"""Every job kind in one table: its spec, its result, its label and the target it runs on.

A job kind is a value of `optistudio.db.models.JobKind` (stored on the row), one `JobKindInfo`
entry in `JOB_KINDS` here, and one work function registered against it in
`optistudio.workers.work`. Everything else follows from the table: the Celery task (always
named ``optistudio.<kind>``, the name brokers hold), its default queue, the studio's submit and
routing, the label the pages show, and how a stored spec and result are read back.

The table is declarative and free of workers and Celery, so the studio and the CLI read it.
Each entry is typed by its spec and result, so `BENCHMARK.parse_spec(row.spec)` is a
`BenchmarkSpec` and `OPTIMIZE.parse_result(row.result)` an `OptimizeJobResult`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from optistudio.core.backends.inventory import trains_on
from optistudio.core.backends.target import BackendName, RunsOnTarget, Threads
from optistudio.core.batching.specs import BatchingVerifySpec, LatencyProfileSpec
from optistudio.core.data.datasets import open_dataset
from optistudio.core.data.images import ImagePreprocessing
from optistudio.core.data.model_inputs import ModelInputs
from optistudio.core.diagnose.diagnostics import DiagnosticsSpec
from optistudio.core.errors import InvalidSpec, describe_validation_error
from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.core.measure.compare import ComparisonSpec
from optistudio.core.measure.soak import SoakReport, SoakSpec
from optistudio.core.model.info import TensorSpec
from optistudio.core.optimize.recipes import ANY, REFERENCE_BACKEND
from optistudio.core.optimize.run import OptimizeSpec, may_train
from optistudio.core.video.settings import VideoSettings
from optistudio.db.models import JobKind
from optistudio.services.artifact_store import local_data_file
from optistudio.services.jobresults import (
    BatchingVerifyJobResult,
    BenchmarkJobResult,
    CompareJobResult,
    ExportJobResult,
    LatencyProfileJobResult,
    OperatorProfileJobResult,
    OptimizeJobResult,
    VideoJobResult,
)

log = logging.getLogger(__name__)

TASK_PREFIX = "optistudio."
DEFAULT_QUEUE = "cpu"
"""The queue every task is routed to unless routing chose a live worker's queue for its target."""

Target = tuple[str, str]
"""(backend, device) a job needs: it is sent to the queue of a live worker that offers it."""
REFERENCE_TARGET: Target = (REFERENCE_BACKEND, "cpu")

SpecT = TypeVar("SpecT", bound=BaseModel)
ResultT = TypeVar("ResultT", bound=BaseModel)


# -- the specs that are more than core's ---------------------------------------------------


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

    def brings_samples(self) -> bool:
        return bool(self.data_path)

    @model_validator(mode="after")
    def _labels_need_data(self) -> OptimizeJobSpec:
        if self.labels_path and not self.data_path:
            raise ValueError("labels need a data file with the inputs they label")
        return self

    def optimize_spec(self) -> OptimizeSpec:
        excluded = {"data_path", "labels_path", "image_preprocessing"}
        return OptimizeSpec(**self.model_dump(exclude=excluded))

    def open_data(self, inputs: list[TensorSpec]) -> tuple[Any, Path | None]:
        """The dataset (.npz, image folder or zip) this job names, validated, and its labels
        file on this worker (read by the task's evaluator: class ids, strings, boxes)."""
        if not self.data_path:
            return None, None
        data_path = local_data_file(self.data_path)  # from the artifact store on this worker
        data = open_dataset(data_path, inputs, preprocessing=self.image_preprocessing)
        labels = local_data_file(self.labels_path) if self.labels_path else None
        return data, labels


class OperatorProfileJobSpec(DiagnosticsSpec):
    """An operator profile of the job's model; with a variant, comparison, INT8 explainer,
    layer error."""

    variant_model_id: int | None = Field(
        default=None, description="A variant (e.g. INT8) profiled and compared with the model."
    )
    data_path: str | None = Field(
        default=None, description="Stored .npz of named input arrays for the per-layer error."
    )
    images_path: str | None = Field(
        default=None, description="Stored folder or .zip of images for the pre-processing stage."
    )

    def brings_samples(self) -> bool:
        return bool(self.data_path)


class ExportJobSpec(BaseModel):
    """A deployable bundle of the job's model; it takes no settings (the bundle is complete)."""

    model_config = ConfigDict(extra="forbid")


class VideoJobSpec(VideoSettings, ModelInputs, RunsOnTarget):
    """Streams of a clip played on the job's model, batched across streams, measured per
    stream; optionally the search for how many real-time streams the machine holds. Its
    `shapes` set the frame size of a model whose image size is dynamic (the image input's full
    shape, e.g. {'x': [1, 3, 224, 224]}); frames are the input, so an inputs file is not used."""

    # Served behind the Pipeline beside the clip's decoders: idle threads must not spin.
    pinned_target: ClassVar[Mapping[str, Any]] = {"spin_wait": False}

    backend: BackendName = "onnxruntime"
    threads: Threads = None
    clip_path: str | None = Field(
        default=None,
        description="Stored clip (.mp4, .mkv, .avi, .webm, .mov) the streams play; none: a "
        "generated clip of moving shapes at 640x360, 25 fps.",
    )
    clip_name: str = Field(default="", description="The uploaded clip's file name, for people.")
    baseline: bool = Field(
        default=True, description="Also play the same streams at max batch 1 (the speedup)."
    )
    capacity: bool = Field(
        default=False, description="Search how many real-time streams this machine holds."
    )
    max_streams: int = Field(
        default=16, ge=1, le=256, description="The most streams the capacity search tries."
    )
    probe_seconds: float = Field(
        default=3.0, gt=0, le=60, description="How long each capacity probe plays."
    )

    def settings(self) -> VideoSettings:
        """The engine's settings: this spec without the job's own fields."""
        return VideoSettings(**self.model_dump(include=set(VideoSettings.model_fields)))


# -- the table ----------------------------------------------------------------------------


@dataclass(frozen=True)
class JobKindInfo(Generic[SpecT, ResultT]):
    """One job kind: what its spec and result are, what it is called, where it runs."""

    kind: JobKind
    label: str
    spec: type[SpecT]
    result: type[ResultT]
    target: Callable[[SpecT], Target]
    queue: str = DEFAULT_QUEUE
    suits: Callable[[SpecT, Mapping[str, Any]], int] = lambda spec, inventory: 0
    """Among the workers that offer the target, how well one (by its inventory) suits the
    job: lower first (a QAT run goes to a worker that trains on a GPU when one is live)."""

    @property
    def task_name(self) -> str:
        """The Celery task that runs this kind, as jobs are sent today."""
        return f"{TASK_PREFIX}{self.kind.value}"

    @property
    def task_names(self) -> tuple[str, ...]:
        """Every task name that runs this kind: today's, then one per former name of the kind
        (`optistudio.db.models.FORMER_JOB_KINDS`), which messages queued before the rename
        still carry. Workers define and route them all."""
        return tuple(f"{TASK_PREFIX}{name}" for name in self.kind.stored_names())

    def parse_spec(self, raw: Mapping[str, Any]) -> SpecT:
        """The typed spec of a job, or InvalidSpec naming each bad field."""
        try:
            return self.spec.model_validate(raw)
        except ValidationError as exc:
            raise InvalidSpec(
                f"The {self.kind.value} settings are invalid: {describe_validation_error(exc)}"
            ) from None

    def dump_spec(self, spec: BaseModel) -> dict[str, Any]:
        """The spec as the job row stores it; TypeError for another kind's spec (a bug)."""
        if not isinstance(spec, self.spec):
            raise TypeError(f"a {self.kind.value} job takes a {self.spec.__name__}, not {spec!r}")
        return spec.model_dump(mode="json")

    def parse_result(self, raw: Mapping[str, Any]) -> ResultT:
        """The typed result of a finished job (pydantic's ValidationError if it is not one)."""
        return self.result.model_validate(raw)

    def read_result(self, raw: Mapping[str, Any] | None) -> ResultT | None:
        """The typed result for a page or a command: None while the job has none, and for a
        stored result that no longer reads as this kind's (logged; the row stays as it is)."""
        if not raw:
            return None
        try:
            return self.parse_result(raw)
        except ValidationError as exc:
            log.warning("a stored %s result does not read: %s", self.kind.value, exc)
            return None

    def dump_result(self, result: BaseModel) -> dict[str, Any]:
        """The result as the job row stores it: validated JSON."""
        if not isinstance(result, self.result):
            raise TypeError(f"a {self.kind.value} job gives a {self.result.__name__}")
        return result.model_dump(mode="json")

    def stored_suits(self, raw: Mapping[str, Any] | None) -> Callable[[dict[str, Any]], int]:
        """`suits` for a stored job, as routing reads it (no preference when its spec is
        invalid)."""
        try:
            spec = self.parse_spec(raw or {})
        except InvalidSpec:
            return lambda inventory: 0
        return lambda inventory: self.suits(spec, inventory)

    def stored_target(self, raw: Mapping[str, Any] | None) -> Target:
        """The target of a stored job; the reference target when its spec is invalid (the
        worker then fails the job, saying which field is wrong)."""
        try:
            return self.target(self.parse_spec(raw or {}))
        except InvalidSpec:
            return REFERENCE_TARGET


def its_own_target(spec: RunsOnTarget) -> Target:
    """The backend and device of the spec's run target: a spec that names no device (the
    operator profile, video) runs on the CPU, RunTarget's default."""
    target = spec.run_target
    return target.backend, target.device


def optimized_for(spec: OptimizeJobSpec) -> Target:
    """The target backend on the CPU; 'any' runs on the reference backend's workers."""
    backend = REFERENCE_BACKEND if spec.target_backend == ANY else spec.target_backend
    return backend, "cpu"


TRAINING_ORDER = {"cuda": 0, "cpu": 1}


def trains_best(spec: OptimizeJobSpec, inventory: Mapping[str, Any]) -> int:
    """A run that may fine-tune prefers a worker whose torch sees a GPU, then one with torch."""
    if not may_train(spec):
        return 0
    return TRAINING_ORDER.get(trains_on(inventory) or "", len(TRAINING_ORDER))


def on_the_reference(spec: ExportJobSpec) -> Target:
    """A job that needs no particular backend: any worker with the reference one."""
    return REFERENCE_TARGET


BENCHMARK = JobKindInfo(
    JobKind.benchmark, "Benchmark", BenchmarkSpec, BenchmarkJobResult, its_own_target
)
COMPARE = JobKindInfo(
    JobKind.compare, "A/B comparison", CompareJobSpec, CompareJobResult, its_own_target
)
OPTIMIZE = JobKindInfo(
    JobKind.optimize,
    "Optimization",
    OptimizeJobSpec,
    OptimizeJobResult,
    optimized_for,
    suits=trains_best,
)
OPERATOR_PROFILE = JobKindInfo(
    JobKind.operator_profile,
    "Operator profile",
    OperatorProfileJobSpec,
    OperatorProfileJobResult,
    its_own_target,
)
SOAK = JobKindInfo(JobKind.soak, "Memory soak", SoakSpec, SoakReport, its_own_target)
LATENCY_PROFILE = JobKindInfo(
    JobKind.latency_profile,
    "Latency profile",
    LatencyProfileSpec,
    LatencyProfileJobResult,
    its_own_target,
)
BATCHING_VERIFY = JobKindInfo(
    JobKind.batching_verify,
    "Batching verification",
    BatchingVerifySpec,
    BatchingVerifyJobResult,
    its_own_target,
)
EXPORT = JobKindInfo(
    JobKind.export, "Export bundle", ExportJobSpec, ExportJobResult, on_the_reference
)
VIDEO = JobKindInfo(JobKind.video, "Video", VideoJobSpec, VideoJobResult, its_own_target)

JOB_KINDS: dict[JobKind, JobKindInfo[Any, Any]] = {
    info.kind: info
    for info in (
        BENCHMARK,
        COMPARE,
        OPTIMIZE,
        OPERATOR_PROFILE,
        SOAK,
        LATENCY_PROFILE,
        BATCHING_VERIFY,
        EXPORT,
        VIDEO,
    )
}
"""Every job kind by its stored value (tests check that it covers JobKind exactly)."""


def job_kind(kind: JobKind) -> JobKindInfo[Any, Any]:
    """The table's entry for a kind."""
    return JOB_KINDS[kind]


def task_names() -> list[str]:
    """Every task the workers define: one per job kind, and one per former name of a kind."""
    return [name for info in JOB_KINDS.values() for name in info.task_names]
