"""What an optimization run is asked: the recipes, the target, the budget, how to time, and
for a decoder how to judge and rank it (`DecoderSettings`).

Its own module so that both runs read it: the one for any model (optistudio.core.optimize.run)
and the decoder's (optistudio.core.optimize.decoder_run); `run` re-exports it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from optistudio.core.backends import backends
from optistudio.core.data.model_inputs import ModelInputs
from optistudio.core.errors import UnknownName, describe_validation_error
from optistudio.core.llm.choice import RankBy
from optistudio.core.measure.compare import ComparisonSpec
from optistudio.core.numerics.accuracy import AccuracyBudget
from optistudio.core.optimize.recipes import ANY
from optistudio.core.passes.base import passes


class DecoderSettings(BaseModel):
    """How a decoder's variants are timed, judged on text and ranked by Auto."""

    model_config = ConfigDict(extra="forbid")

    rank_by: RankBy = Field(
        default="tokens_per_s",
        description="What Auto ranks variants by within the perplexity budget: tokens_per_s "
        "(greedy decoding at batch 1, the default), ttft (time to first token of the prompt) "
        "or throughput (greedy decoding tokens/s at `batch`).",
    )
    batch: int = Field(default=4, ge=1, le=256, description="Batch size of the throughput figure.")
    prompt_tokens: int = Field(
        default=32, ge=1, le=8192, description="Prompt tokens of each timed run (its TTFT)."
    )
    decode_steps: int = Field(
        default=16, ge=1, le=1024, description="Greedy steps timed after the prompt of each run."
    )
    window: int = Field(
        default=128,
        ge=2,
        le=8192,
        description="Tokens per perplexity window (each run from an empty cache; at most the "
        "model's context).",
    )
    max_tokens: int = Field(
        default=4096,
        ge=2,
        le=1_000_000,
        description="Tokens of the evaluation text used at most (its start).",
    )


class UnsteadyTiming(BaseModel):
    """How long Auto may time more rounds of a candidate whose first interval cannot tell
    whether it is faster (optistudio.core.optimize.unsteady)."""

    model_config = ConfigDict(extra="forbid")

    candidate_seconds: float = Field(
        default=20.0,
        ge=0,
        le=600,
        description="Most seconds of more interleaved rounds for one candidate whose speedup "
        "interval straddles the threshold Auto needs (on one thread when the machine is "
        "busy); 0 = never time more rounds.",
    )
    job_seconds: float = Field(
        default=60.0,
        ge=0,
        le=3600,
        description="Most seconds of more rounds for all candidates of one run together, "
        "spent on the most promising first; 0 = never time more rounds.",
    )


QUICK_COMPARISON = ComparisonSpec(min_pairs=30, min_seconds=1.5, max_seconds=15.0)

NO_TASK = "none"
"""OptimizeSpec.task that judges by cosine and top-1 alone."""


class OptimizeSpec(ModelInputs):
    """What to try and what the variants must keep."""

    model_config = ConfigDict(extra="forbid")

    recipes: list[str] = Field(
        default_factory=lambda: ["auto"],
        description="Recipe names to apply, or 'auto' for the candidates that suit the model.",
    )
    target_backend: str = Field(
        default="any",
        description="Backend the variants target, or 'any': every backend available on the "
        "CPU, so Auto chooses the backend too (speedups are then against the original on "
        "ONNX Runtime, the reference).",
    )
    budget: AccuracyBudget = Field(
        default_factory=AccuracyBudget,
        description="What a variant may lose in cosine and top-1: the judge when no task is "
        "recognized or set.",
    )
    task: str | None = Field(
        default=None,
        description="The task variants are judged in: an evaluator's name (classification, "
        "ctc_text, ...), 'none' for cosine and top-1 only; empty = recognized from the outputs.",
    )
    budgets: dict[str, float] = Field(
        default_factory=dict,
        description="Limits in the task's terms by metric name, e.g. {'string_agreement': "
        "0.99, 'top1_drop': 0.01}; each metric's direction says which side passes. Empty = the "
        "task's default budget.",
    )
    speed_only: bool = Field(
        default=False,
        description="Let Auto choose INT8 variants calibrated on random inputs (no data given, "
        "no built-in samples for the model's inputs), or on built-in samples with no task to "
        "check them; their accuracy is then only agreement on those inputs.",
    )
    comparison: ComparisonSpec = Field(
        default_factory=lambda: QUICK_COMPARISON.model_copy(),
        description="How each variant is timed against the original (interleaved).",
    )
    unsteady_timing: UnsteadyTiming = Field(
        default_factory=UnsteadyTiming,
        description="When a candidate's speedup interval straddles the threshold Auto needs "
        "(faster by the comparison's min_effect), more interleaved rounds are timed until it "
        "resolves or these caps pass; the variant's timing note says which.",
    )
    one_thread_when_busy: bool = Field(
        default=True,
        description="Time every variant on one thread when other processes keep the machine "
        "busy and no threads are set (optistudio.core.optimize.steady): one thread's speedups "
        "hold still beside load where those on every core do not.",
    )
    accuracy_samples: int = Field(
        default=32,
        ge=1,
        le=100_000,
        description="Built-in (else random) samples when no data is given.",
    )
    accuracy_output: str | None = Field(
        default=None,
        description="The output the accuracy budget judges, e.g. 'sentence_embedding'; "
        "empty = the first output.",
    )
    pass_settings: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Settings per pass name, laid over every recipe step of that pass, e.g. "
        "{'fusion': {'patterns': ['conv_bn', 'conv_relu']}, 'int8_static': {'per_channel': false}}.",
    )
    decoder: DecoderSettings = Field(
        default_factory=DecoderSettings,
        description="For a decoder with a KV cache: how its variants are timed (TTFT, tokens/s), "
        "judged on text (perplexity) and ranked by Auto.",
    )

    @model_validator(mode="after")
    def _check_target(self) -> OptimizeSpec:
        if self.target_backend != ANY:
            try:
                backends.get(self.target_backend)
            except UnknownName as exc:
                raise ValueError(f"{exc.message} Or 'any'.") from None
        return self

    @model_validator(mode="after")
    def _check_pass_settings(self) -> OptimizeSpec:
        for name, settings in self.pass_settings.items():
            try:
                passes.get(name).config_class().model_validate(settings)
            except ValidationError as exc:
                raise ValueError(f"{name}: {describe_validation_error(exc)}") from None
            except UnknownName as exc:
                raise ValueError(exc.message) from None
        return self
