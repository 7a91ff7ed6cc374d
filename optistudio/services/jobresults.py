"""What each job kind stores as its result: validated JSON in `Job.result`, read back typed.

Workers build one of these models and store `model_dump(mode="json")`; the studio and the CLI
read the row back with `JobKindInfo.parse_result` (optistudio.services.jobkinds). The field
names are the keys rows already hold, so results stored before these models existed load as
they are. Most are core's reports with the job's own additions (the other model's id and name,
the stored variant's model id).
"""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from optistudio.core.backends.base import Precision
from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.results import LoadResult
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.verify_policy import VerifyPrediction
from optistudio.core.diagnose.diagnostics import DiagnosticsReport
from optistudio.core.llm.serving import DecoderBenchReport
from optistudio.core.llm.serving_whatif import DecodeProfile
from optistudio.core.measure.compare import Comparison
from optistudio.core.numerics.crosscheck import OutputCheck
from optistudio.core.optimize.run import OptimizeReport, VariantResult
from optistudio.core.video.report import VideoReport


class BenchmarkTarget(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: str
    device: str
    precision: Precision
    execution_provider: str | None = None


class BenchmarkJobResult(BaseModel):
    """A benchmark's summary; its figures are rows of the measurements table."""

    model_config = ConfigDict(extra="forbid")

    target: BenchmarkTarget
    output_check: OutputCheck | None = Field(
        default=None,
        description="Outputs against ONNX Runtime FP32 on CPU; None for that reference itself "
        "(and absent from rows stored before outputs were checked).",
    )
    runtime: dict[str, Any] = Field(default_factory=dict, description="What the runtime used.")
    warnings: list[str] = Field(default_factory=list)
    decoder: DecoderBenchReport | None = Field(
        default=None,
        exclude_if=lambda report: report is None,  # other models' rows stay as they were
        description="A decoder with a KV cache, timed by decoding: TTFT per prompt length and "
        "tokens/s per batch (its measurement rows are absent); None for any other model.",
    )


class CompareJobResult(Comparison):
    """The paired comparison of the job's model (A) with its candidate (B)."""

    candidate_model_id: int
    candidate_name: str


class StoredVariant(VariantResult):
    """A variant as the optimize job stored it: with the id of the model it became."""

    model_id: int | None = Field(
        default=None, description="The stored model of the variant; None when it failed."
    )


class OptimizeJobResult(OptimizeReport):
    """The optimization report, each variant with its stored model's id."""

    variants: list[StoredVariant]  # type: ignore[assignment]  # a VariantResult with its id


class OperatorProfileJobResult(DiagnosticsReport):
    """The diagnostics report, with the variant's id and name when one was profiled."""

    variant_model_id: int | None = None
    variant_name: str = ""


class StoredRecommendation(BaseModel):
    """What `optistudio batching recommend` found on a profile (`tuner.Recommendation` less its
    candidates): the setting an export serves when no Verify measured one."""

    model_config = ConfigDict(extra="forbid")

    settings: BatchingSettings
    feasible: bool = Field(description="Whether the setting keeps the p99 budget.")
    reason: str = Field(description="Why this setting, in words.")
    p99_budget_ms: float = Field(description="The p99 budget it was searched under.")
    rate: float | None = Field(default=None, description="The arrival rate (None: max rate).")


class LatencyProfileJobResult(BaseModel):
    """Latency per batch size and the best throughput one instance reaches; for a decoder with
    a KV cache, the cost of a decoding step per batch size and of a prefill per prompt length
    instead (one of the two profiles, never both)."""

    model_config = ConfigDict(extra="forbid")

    profile: LatencyProfile | None = Field(
        default=None,
        description="Latency per batch size of one-shot requests; None for a decoder.",
    )
    ceiling: float | None = Field(
        default=None,
        description="Most requests per second per instance; None for a decoder.",
    )
    best_batch: int | None = Field(
        default=None,
        description="The batch size that reaches the ceiling; None for a decoder.",
    )
    decode_profile: DecodeProfile | None = Field(
        default=None,
        description="A decoder with a KV cache, timed by decoding: ms per step at each live "
        "batch size and per prefill at each prompt length; None for any other model.",
    )
    recommendation: StoredRecommendation | None = Field(
        default=None,
        description="The setting `optistudio batching recommend` chose on this profile; None "
        "for a profile alone.",
    )

    @model_serializer(mode="wrap")
    def _without_the_other_profile(self, handler: SerializerFunctionWrapHandler) -> Any:
        """The fields of the profile it holds only: other models' rows store as they did
        before decoders, and a decoder's holds no empty latency fields."""
        data = handler(self)
        for name in ("profile", "ceiling", "best_batch", "decode_profile", "recommendation"):
            if isinstance(data, dict) and data.get(name) is None:
                data.pop(name, None)
        return data

    @model_validator(mode="after")
    def _one_profile(self) -> LatencyProfileJobResult:
        if (self.profile is None) == (self.decode_profile is None):
            raise ValueError(
                "a latency profile job holds a latency or a decode profile, one of them"
            )
        if self.profile is not None and (self.ceiling is None or self.best_batch is None):
            raise ValueError("a latency profile comes with its ceiling and best batch")
        return self


class RequestSamples(BaseModel):
    """Per-request times of a verification run (ms), evenly thinned for the charts."""

    model_config = ConfigDict(extra="forbid")

    sent_ms: list[float]
    queue_ms: list[float]
    compute_ms: list[float]
    latency_ms: list[float]


class VerifyBatches(BaseModel):
    """What the runtime did per batch under load."""

    model_config = ConfigDict(extra="forbid")

    runner: dict[int, tuple[int, float]] = Field(
        description="Per batch size (rows): how many batches ran and their mean runner ms."
    )
    handoff_ms: float | None = Field(default=None, description="Mean hand-back per batch.")


class BatchingVerifyJobResult(BaseModel):
    """A measured run of the batching settings under load."""

    model_config = ConfigDict(extra="forbid")

    measured: LoadResult
    requests: RequestSamples
    errors: list[str] = Field(default_factory=list, description="The first failed requests.")
    p99_halves_ms: tuple[float, float] | None = Field(
        default=None, description="p99 of the run's first and second half; None if too short."
    )
    batches: VerifyBatches | None = Field(
        default=None, description="None for runs stored before batches were recorded."
    )
    prediction: VerifyPrediction | None = Field(
        default=None,
        description="What the profile predicted for this run, and the profile it refitted (None "
        "for runs stored before Verify recalibrated, or with no succeeded profile job).",
    )


class ExportJobResult(BaseModel):
    """Where the bundle was written and what it holds."""

    model_config = ConfigDict(extra="forbid")

    bundle: str = Field(description="Path of the zip on the worker's artifact folder.")
    size_bytes: int
    files: int = Field(description="Members of the bundle.")
    skipped: dict[str, str] = Field(
        default_factory=dict, description="Parts left out, with the reason."
    )


class VideoJobResult(VideoReport):
    """The video run's report, with the clip the streams played."""

    clip: str = Field(
        default="", description="The uploaded clip's file name, or 'generated' for a made one."
    )
