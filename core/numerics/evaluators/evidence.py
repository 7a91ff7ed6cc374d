"""Evidence for a task: short sentences read from a model, each with a weight, and their sum.

An evaluator states its case for a model as evidence items (`Evaluator.weigh`). Each has a
weight w (> 0 speaks for the task, < 0 against) and a kind:

- `structure`: the outputs' ranks and shapes and the ops that made them (a Softmax on the class
  axis, a Sigmoid, an ArgMax, a Concat of box and score heads, NMS rows);
- `input`: what the model takes (an image batch, token ids, audio), against the kinds the task's
  models take (`EvaluatorInfo.input_kinds`);
- `name`: what an output is called ('sentence_embedding', 'logits');
- `metadata`: the model's metadata (a 'character' list, label names).

For a case with items i, summing w_i:

    structure = sum over structure items        graph = sum over structure, input, name items
    total     = sum over every item

A case decides only when structure > 0, graph >= WEAK and total >= DECIDES: the graph itself must
speak for the task. Metadata alone never decides, whatever it says; it adds to what the graph
shows (a 'character' list one entry per class) or counts against it (a list whose length fits no
class count), so it can lift a case over the line or sink it, never carry one.

Weights: STRONG (3) a fact that names the task nearly on its own ([N, T, C] after a Softmax on
the class axis); MODERATE (2) one that fits the task among a few others (a linear head [N, C]);
WEAK (1) a hint (an output name, the input kind, a float [N, T, C] of unknown meaning). The
confidence a decided case states is read from its total: high >= 4 (a strong fact and something
that agrees with it), medium >= 3, low >= 2 (one moderate fact).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

EvidenceKind = Literal["structure", "input", "name", "metadata"]
Confidence = Literal["high", "medium", "low"]

STRONG = 3.0
MODERATE = 2.0
WEAK = 1.0
DECIDES = 2.0
HIGH = 4.0
MEDIUM = 3.0
KIND_WORDS = {"structure": "graph", "input": "inputs", "name": "name", "metadata": "metadata"}


class Evidence(BaseModel):
    """One thing read from the model that speaks for a task (weight > 0) or against it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: EvidenceKind
    weight: float = Field(description="> 0 for the task, < 0 against; STRONG is 3.")
    text: str = Field(description="What was read, naming the output or input and its shape.")

    def line(self) -> str:
        """'+3 graph: probs [N, T, 37] after Softmax on the last axis'."""
        return f"{self.weight:+g} {KIND_WORDS[self.kind]}: {self.text}"


def total(items: Iterable[Evidence]) -> float:
    return sum(item.weight for item in items)


def structure(items: Iterable[Evidence]) -> float:
    return total(item for item in items if item.kind == "structure")


def from_graph(items: Iterable[Evidence]) -> float:
    """The sum over everything but metadata: what the graph says on its own."""
    return total(item for item in items if item.kind != "metadata")


def decides(items: Sequence[Evidence]) -> bool:
    """Whether the evidence decides its task (module docstring)."""
    return structure(items) > 0 and from_graph(items) >= WEAK and total(items) >= DECIDES


def confidence(items: Sequence[Evidence]) -> Confidence:
    """high, medium or low, from the total (call it on evidence that decides)."""
    summed = total(items)
    return "high" if summed >= HIGH else "medium" if summed >= MEDIUM else "low"


def why_undecided(items: Sequence[Evidence]) -> str:
    """Why evidence that does not decide falls short, in words."""
    graph_for = any(item.weight > 0 and item.kind != "metadata" for item in items)
    metadata_for = any(item.weight > 0 and item.kind == "metadata" for item in items)
    if structure(items) <= 0 or from_graph(items) < WEAK:
        if not graph_for:
            if metadata_for:
                return "only the metadata speaks for it, and metadata alone never decides"
            return "no output is shaped or made like this task's"
        if metadata_for and total(items) >= DECIDES:
            return "the metadata would carry it past the graph, and metadata alone never decides"
        return "what the graph shows for it is outweighed by what speaks against it"
    return f"the evidence sums to {total(items):g}, under the {DECIDES:g} that decides"


def lines(items: Iterable[Evidence]) -> list[str]:
    """Each item as a short sentence, the heaviest (for or against) first."""
    return [item.line() for item in sorted(items, key=lambda item: -abs(item.weight))]
