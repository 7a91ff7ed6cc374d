"""The evaluator contract: judging a variant by what its task makes of its outputs.

An evaluator serves one task (classification, CTC text recognition, detection, segmentation,
embeddings, regression). It is known by an `EvaluatorInfo` registered through the
`optistudio.evaluators` entry-point group, as passes and backends are (built-ins the same way;
only installed packages, never uploaded code). The info is light: its name, label, the task's
metrics with their direction and unit, the default budget, and 'module:Class' of the evaluator.

An evaluator

- recognizes its task from the model's outputs (`recognize(facts)`), with the reason a person
  can check ("[N, 40, 6625] after Softmax on the last axis: a CTC text recognizer"), or None;
- states its case for the task (`weigh(facts)`): the outputs it would judge and the evidence for
  and against, each item weighted (`evidence`), from which recognition decides and states its
  confidence; the default is one strong structural item, the reason `recognize` gives;
- tallies batches of the original's and the variant's outputs (`tally(...)`, then `add` per
  batch, or `add_run` with the number of samples fed), reading their layout from the arrays a
  run returned, not from the declared shapes, in one of two modes: agreement with the original
  (no labels), or accuracy against labels;
- scores (`TaskTally.score()`): its metrics by name, and the samples where the two disagree
  most, each with both readings (the drill-down).

A budget is `{metric: limit}`; a metric's direction says which side of the limit passes
(`MetricInfo.passes`): string_agreement=0.99 needs >= 0.99, top1_drop=0.01 needs <= 0.01.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.data.datasets import load_labels
from optistudio.core.loader import load
from optistudio.core.model.info import Dim
from optistudio.core.numerics.evaluators.evidence import STRONG, Confidence, Evidence
from optistudio.core.registry import Registry

Mode = Literal["agreement", "labels"]


class MetricInfo(BaseModel):
    """One metric of a task: what it is called, which way is better, in what unit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Stable snake_case name, used in budgets: string_agreement.")
    label: str = Field(description="What the pages call it: 'String agreement'.")
    higher_is_better: bool
    unit: Literal["fraction", "ratio", "points", "value"] = Field(
        default="fraction",
        description="fraction: 0..1 shown as %; points: a drop of a fraction (0.01 = 1 point).",
    )
    description: str = ""
    needs_labels: bool = Field(default=False, description="Only measured against labels.")

    def passes(self, value: float, limit: float) -> bool:
        """Whether `value` is within a budget of `limit` (>= for higher-is-better, else <=)."""
        return value >= limit if self.higher_is_better else value <= limit

    def sign(self, ok: bool) -> str:
        """The comparison a budget line prints: '>=', '<', '<=' or '>'."""
        if self.higher_is_better:
            return ">=" if ok else "<"
        return "<=" if ok else ">"


class OutputFacts(BaseModel):
    """What the graph says about one output: its declared shape, and what node made it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    dtype: str
    shape: list[Dim]
    producer: str = Field(
        default="", description="Op type of the node that made it, past Identity/Reshape/Cast."
    )
    producer_axis: int | None = Field(
        default=None, description="The producer's axis attribute (Softmax, ArgMax...), if any."
    )
    feeds: list[str] = Field(
        default_factory=list, description="Op types of the producer's own producers."
    )
    written_as: str = Field(
        default="",
        description="When the producer was read from a chain of primitive ops (a Softmax "
        "written as Exp / ReduceSum / Div), that chain; '' for a single node.",
    )
    scalar: bool = Field(
        default=False,
        description="Declared (or run) with rank 0: one value, where a shape [] may also "
        "mean a rank the file leaves unknown.",
    )
    scaled_from: str = Field(
        default="",
        description="The squashing op (Sigmoid, Tanh) the output is made from when only "
        "constant scales and shifts follow it (1 + 4 * sigmoid(x): a score on a fixed range); "
        "'' otherwise.",
    )


class ModelFacts(BaseModel):
    """What recognition reads: the outputs, in order, and the inputs' shapes."""

    model_config = ConfigDict(extra="forbid")

    outputs: list[OutputFacts]
    input_shapes: dict[str, list[Dim]] = Field(default_factory=dict)
    input_dtypes: dict[str, str] = Field(
        default_factory=dict, description="The inputs' numpy dtype names: int64 token ids..."
    )
    metadata_keys: list[str] = Field(default_factory=list)
    constant_outputs: list[str] = Field(
        default_factory=list,
        description="Outputs no input reaches: computed from weights and constants alone, the "
        "same for every input.",
    )
    metadata: dict[str, str] = Field(
        default_factory=dict,
        repr=False,
        description="The metadata's values by key: a PaddleOCR recognizer's 'character' list.",
    )


class Recognition(BaseModel):
    """A task recognized in a model (or set by the user), and why."""

    model_config = ConfigDict(extra="forbid")

    task: str = Field(description="The evaluator's name.")
    reason: str = Field(description="Why, naming the outputs and shapes read.")
    outputs: list[str] = Field(description="The outputs the evaluator judges, in its order.")
    chosen_by: Literal["recognized", "user"] = "recognized"
    confidence: Confidence | None = Field(
        default=None,
        description="How strongly the evidence supports the task: high, medium or low "
        "(`evidence`); None when the user set the task.",
    )
    reasons: list[str] = Field(
        default_factory=list,
        description="The evidence weighed, one short sentence each with its weight "
        "('+3 graph: probs [N, T, 37] after Softmax on the last axis'), heaviest first.",
    )
    vocabulary: list[str] | None = Field(
        default=None,
        exclude=True,
        repr=False,
        description="CTC text: the characters class ids 1.. stand for (0 is the blank), from "
        "the model's 'character' metadata; None reads strings as class ids. Derived from the "
        "model, so left out of dumps: recognize again to get it back.",
    )
    image_size: tuple[int, int] | None = Field(
        default=None,
        exclude=True,
        repr=False,
        description="Detection: the image input's height and width where the model fixes them, "
        "on which PicoDet-style heads' cells are placed; None when they are not fixed. Derived "
        "from the model, so left out of dumps.",
    )


class Case(BaseModel):
    """An evaluator's case for its task in a model: what it would judge, and the evidence."""

    model_config = ConfigDict(extra="forbid")

    recognition: Recognition = Field(
        description="The task as it would be judged: its outputs and the one-line reason."
    )
    evidence: list[Evidence] = Field(description="Every item weighed, for and against.")


class Disagreement(BaseModel):
    """One sample where the variant and the original disagree: both readings, and how much."""

    model_config = ConfigDict(extra="forbid")

    sample: int = Field(description="Index of the sample in the data.")
    reference: str = Field(description="What the original made of it: 'HELLO', 'class 3'.")
    candidate: str = Field(description="What the variant made of it.")
    label: str | None = Field(default=None, description="The label's reading, when given.")
    severity: float = Field(description="How far apart, in the task's terms; larger is worse.")


class TaskScore(BaseModel):
    """An evaluator's verdict on a variant: its metrics by name, the worst samples."""

    model_config = ConfigDict(extra="forbid")

    task: str
    mode: Mode
    samples: int
    metrics: dict[str, float]
    worst: list[Disagreement] = Field(default_factory=list)
    note: str = ""
    void: str = Field(
        default="",
        description="Why these metrics say nothing about the model (the original's own top two "
        "tie on most samples, so every variant 'agrees'): the numbers judge instead; '' when "
        "they judge.",
    )
    floor_exempt: list[str] = Field(
        default_factory=list,
        description="Outputs the task reads as sets (boxes after the model's own NMS, whose "
        "rows may come in another order), left out of the numeric floor.",
    )


class TaskTally(ABC):
    """Running sums of one evaluation (memory bounded by the kept worst samples)."""

    @abstractmethod
    def add(
        self,
        reference: dict[str, np.ndarray],
        candidate: dict[str, np.ndarray],
        *,
        first_sample: int,
    ) -> None:
        """One batch of both models' outputs by name; `first_sample` indexes its first row."""

    def add_run(
        self,
        reference: dict[str, np.ndarray],
        candidate: dict[str, np.ndarray],
        *,
        first_sample: int,
        samples: int,
    ) -> None:
        """One batch as a run returned it, with the number of `samples` fed: what the accuracy
        check calls. A tally whose outputs need it to find the samples (NMS rows [K, 7] that
        carry a batch index, CTC scores [T, N, C]) overrides this; the default calls `add`."""
        self.add(reference, candidate, first_sample=first_sample)

    @abstractmethod
    def score(self) -> TaskScore:
        """The metrics over every batch added (DataMismatch when nothing was)."""


class FedSamplesTally(TaskTally):
    """A tally that reads its outputs by the number of samples fed, when it is known: `add`
    and `add_run` both come to `add_fed`, with None for `samples` from a plain `add`."""

    def add(
        self,
        reference: dict[str, np.ndarray],
        candidate: dict[str, np.ndarray],
        *,
        first_sample: int,
    ) -> None:
        self.add_fed(reference, candidate, first_sample, None)

    def add_run(
        self,
        reference: dict[str, np.ndarray],
        candidate: dict[str, np.ndarray],
        *,
        first_sample: int,
        samples: int,
    ) -> None:
        self.add_fed(reference, candidate, first_sample, samples)

    @abstractmethod
    def add_fed(
        self,
        reference: dict[str, np.ndarray],
        candidate: dict[str, np.ndarray],
        first_sample: int,
        samples: int | None,
    ) -> None:
        """One batch of both models' outputs; `samples` fed, None where the caller did not say."""


class Evaluator(ABC):
    """One task's judge; `info` is its registry entry."""

    info: EvaluatorInfo

    @abstractmethod
    def recognize(self, facts: ModelFacts) -> Recognition | None:
        """This task, and why, when the outputs look like it; else None."""

    def weigh(self, facts: ModelFacts) -> Case | None:
        """This task's case in the model: the outputs it would judge and the evidence for and
        against (`evidence`); None when nothing speaks for it. The default: what `recognize`
        found, as one strong structural item."""
        found = self.recognize(facts)
        if found is None:
            return None
        return Case(
            recognition=found,
            evidence=[Evidence(kind="structure", weight=STRONG, text=found.reason)],
        )

    def for_outputs(self, facts: ModelFacts, outputs: list[str] | None = None) -> Recognition:
        """The task set by the user: the outputs it judges (`outputs`, else the ones
        `recognize` would pick, else the first) and a reason saying the user chose it.
        Raises InvalidSpec when the outputs cannot be judged this way."""
        found = self.recognize(facts)
        picked = outputs or (found.outputs if found else [facts.outputs[0].name])
        return Recognition(
            task=self.info.name,
            reason=f"set by the user; judged on {', '.join(picked)}",
            outputs=picked,
            chosen_by="user",
            reasons=["set by the user: no evidence weighed"],
        )

    @abstractmethod
    def tally(self, recognition: Recognition, labels: Any | None = None) -> TaskTally:
        """A fresh tally; with `labels` (one per sample, as `read_labels` gives) it measures
        accuracy against them too."""

    def read_labels(self, path: Path, *, samples: int) -> Any:
        """Labels from a user's file for this task, one per sample; the default reads class
        ids (.npy or .csv). DataMismatch names what is wrong with the file."""
        return load_labels(path, samples=samples)


class EvaluatorInfo(BaseModel):
    """What the UI and the registry know about an evaluator without importing it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Stable task name: classification, ctc_text, ...")
    label: str
    description: str
    metrics: list[MetricInfo]
    default_budget: dict[str, float] = Field(
        description="The budget Auto uses for this task unless the user sets one."
    )
    labels_budget: dict[str, float] = Field(
        default_factory=dict,
        description="The budget when labels are given (accuracy against them, e.g. top1_drop); "
        "empty = default_budget.",
    )
    implementation: str = Field(description="'module:Class' of the Evaluator.")
    priority: int = Field(
        default=100,
        description="Recognition order: lower is tried first (specific tasks first), and wins "
        "when two tasks' evidence weighs the same.",
    )
    input_kinds: tuple[str, ...] = Field(
        default=(),
        description="The kinds of input this task's models take (image, tokens, audio): "
        "recognition counts a model whose inputs are one as support, another known kind as "
        "evidence against; empty: any input.",
    )

    def create(self) -> Evaluator:
        evaluator: Evaluator = load(self.implementation)()
        evaluator.info = self
        return evaluator

    def metric(self, name: str) -> MetricInfo:
        """The metric called `name`; KeyError if this task has none such."""
        for metric in self.metrics:
            if metric.name == name:
                return metric
        raise KeyError(name)


evaluators: Registry[EvaluatorInfo] = Registry("evaluator", "optistudio.evaluators")
