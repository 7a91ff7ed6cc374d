"""Reading one output's facts: its shape in words, its size, and what its producer says.

Recognition rules of every task read outputs the same way; the reasons they give quote shapes
as `shape_text` writes them: a fixed size as its number, a dynamic one as the letter of its role
([N, T, 6625], [N, 1, H, W]). The producer sets mirror `accuracy.output_role`: a classifier's
scores come from a Softmax / LogSoftmax / Sigmoid or a linear head (Gemm, MatMul, MatMul + bias);
an embedding from pooling or normalization. An evaluator that weighs each output in turn keeps
the strongest output's case (`strongest`) and recognizes its task when that case decides
(`recognized`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal

from optistudio.core.errors import InvalidSpec
from optistudio.core.model.info import Dim
from optistudio.core.numerics.evaluators.base import (
    Case,
    Evaluator,
    ModelFacts,
    OutputFacts,
    Recognition,
)
from optistudio.core.numerics.evaluators.evidence import decides, total

CLASSIFIER_HEADS = frozenset({"Softmax", "LogSoftmax", "Sigmoid", "Gemm", "MatMul"})
LINEAR_OPS = frozenset({"MatMul", "Gemm"})
EMBEDDING_MAKERS = frozenset(
    {"Div", "LpNormalization", "ReduceMean", "ReduceSum", "ReduceL2", "Mul", "GlobalAveragePool"}
)
FLOAT_DTYPES = frozenset({"float16", "float32", "float64", "bfloat16"})
SQUASHING = frozenset({"Softmax", "LogSoftmax", "Sigmoid", "HardSigmoid", "Tanh", "ArgMax"})
"""Ops that make probabilities or decisions: an output they make holds no regressor's values."""
FEW_VALUES = 4
"""A linear head of this many values or fewer per sample reads as a regressor's as much as a
classifier's."""
REGRESSION_WORDS = ("regress", "predict", "variable", "value", "mos", "quality", "age")
"""Output names that say 'a value': skl2onnx calls a regressor's output 'variable'."""


def size(dim: Dim) -> int | None:
    """A dim's fixed size, or None when it is dynamic."""
    return dim if isinstance(dim, int) and dim > 0 else None


def shape_text(shape: list[Dim], letters: str = "") -> str:
    """'[N, 40, 6625]': fixed sizes as numbers, dynamic dims as the letter of their role
    (`letters`, one per axis; '?' past them)."""
    parts = [
        str(size(dim)) if size(dim) else (letters[axis] if axis < len(letters) else "?")
        for axis, dim in enumerate(shape)
    ]
    return "[" + ", ".join(parts) + "]"


def output_role(output: OutputFacts) -> Literal["classifier", "embedding", "other"]:
    """What made the output, as `accuracy.output_role` reads it from the graph."""
    if output.producer == "Add":
        return "classifier" if LINEAR_OPS & set(output.feeds) else "other"
    if output.producer in CLASSIFIER_HEADS:
        return "classifier"
    return "embedding" if output.producer in EMBEDDING_MAKERS else "other"


def linear_head(output: OutputFacts) -> bool:
    """Whether a linear layer made the output: Gemm, MatMul, or MatMul / Gemm + bias."""
    return output.producer in LINEAR_OPS or (
        output.producer == "Add" and bool(LINEAR_OPS & set(output.feeds))
    )


def made_by(output: OutputFacts) -> str:
    """'Softmax', 'MatMul + bias', 'Softmax (written as Exp / ReduceSum / Div)' or 'a graph
    input or constant': the producer in words."""
    if output.written_as:
        return f"{output.producer} (written as {output.written_as})"
    if output.producer == "Add" and LINEAR_OPS & set(output.feeds):
        return f"{sorted(LINEAR_OPS & set(output.feeds))[0]} + bias"
    return output.producer or "a graph input or constant"


def on_last_axis(output: OutputFacts) -> bool:
    """Whether the producer's axis attribute names the output's last axis."""
    axis = output.producer_axis
    return axis is not None and axis in (-1, len(output.shape) - 1)


def is_float(output: OutputFacts) -> bool:
    return output.dtype in FLOAT_DTYPES


def named_like(output: OutputFacts, *words: str) -> bool:
    """Whether the output's name contains any of `words` (case-insensitive)."""
    name = output.name.lower()
    return any(word in name for word in words)


def image_input(facts: ModelFacts) -> list[Dim] | None:
    """The shape of the model's one rank-4 input, if it has exactly one (an image batch)."""
    images = [shape for shape in facts.input_shapes.values() if len(shape) == 4]
    return images[0] if len(images) == 1 else None


def same_spatial(shape: list[Dim], facts: ModelFacts) -> bool:
    """Whether an [N, K, H, W] output can be the size of the image input: both dims equal
    where both are fixed (a dynamic one could be anything). False without an image input."""
    image = image_input(facts)
    if image is None or len(shape) != 4:
        return False
    return all(
        size(ours) is None or size(theirs) is None or ours == theirs
        for ours, theirs in zip(shape[2:], image[2:], strict=True)
    )


def output_named(facts: ModelFacts, name: str) -> OutputFacts:
    """The output called `name`; InvalidSpec listing the outputs when there is none."""
    for output in facts.outputs:
        if output.name == name:
            return output
    names = ", ".join(output.name for output in facts.outputs)
    raise InvalidSpec(
        f"The model has no output {name!r}. Its outputs: {names}.",
        hint="Pick one of the model's outputs, or leave the outputs to recognition.",
    )


def cannot_judge(task: str, output: OutputFacts, why: str) -> InvalidSpec:
    """The error a task set by the user gives when an output does not fit it."""
    return InvalidSpec(
        f"The {task} task cannot judge output {output.name!r} "
        f"{shape_text(output.shape, 'N')}: {why}.",
        hint="Pick another task or output, or leave the task to recognition.",
    )


def checked(
    task: str,
    facts: ModelFacts,
    outputs: list[str],
    why_not: Callable[[OutputFacts], str | None],
) -> None:
    """InvalidSpec for the first of `outputs` whose declared shape the task cannot read
    (`why_not` gives why); an output of unknown rank passes, its data is checked later."""
    for name in outputs:
        output = output_named(facts, name)
        why = why_not(output) if output.shape else None
        if why:
            raise cannot_judge(task, output, why)


class OneOutputEvaluator(Evaluator):
    """An evaluator that judges one output: set by the user, it checks that output's declared
    shape with `why_not` (None: it can be judged) and keeps only it."""

    @staticmethod
    def why_not(output: OutputFacts) -> str | None:
        return None

    def for_outputs(self, facts: ModelFacts, outputs: list[str] | None = None) -> Recognition:
        chosen = super().for_outputs(facts, outputs)
        checked(self.info.name, facts, chosen.outputs[:1], self.why_not)
        return chosen.model_copy(update={"outputs": chosen.outputs[:1]})


def strongest(cases: Iterable[Case | None]) -> Case | None:
    """The case with the highest total (the first of equals); None when there is none."""
    found = [case for case in cases if case is not None]
    return max(found, key=lambda case: total(case.evidence)) if found else None


def recognized(case: Case | None) -> Recognition | None:
    """The case's recognition when its evidence decides (`evidence.decides`), else None."""
    return case.recognition if case is not None and decides(case.evidence) else None


class WeighedEvaluator(OneOutputEvaluator):
    """A one-output evaluator that recognizes its task by weighing: `case` states the case for
    one output (None where it cannot be this task's), `weigh` keeps the strongest output's
    (`strongest`) and `recognize` takes it when its evidence decides (`recognized`)."""

    @staticmethod
    def case(task: str, output: OutputFacts) -> Case | None:
        return None

    def recognize(self, facts: ModelFacts) -> Recognition | None:
        return recognized(self.weigh(facts))

    def weigh(self, facts: ModelFacts) -> Case | None:
        return strongest(self.case(self.info.name, output) for output in facts.outputs)
