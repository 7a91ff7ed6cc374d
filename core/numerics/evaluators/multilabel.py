"""Multi-label: sigmoid outputs judged by how many of their thresholded cells flip.

The judged outputs are every float output made by a Sigmoid with more than one value per sample:
[N, K] (a probability per label), or maps [N, T, K], [N, K, H, W] (a probability per cell: the
notes of an audio-to-MIDI model, the channels of a mask). Weighed as evidence (`evidence`): labels
[N, K] are STRONG, maps MODERATE (a [N, 1, H, W] map of one channel WEAK: `detection_map` reads
text maps);
other float outputs beside them MODERATE against (a detector's class scores beside its boxes);
an image, token or audio input WEAK support. The cells are decided at 0.5 and counted by
`thresholds`:

    clear_positive_f1    = F1 of the variant's cells that are on against the original's, its
                           near-tie flips undone          (default budget: >= 0.95)
    clear_cell_flip_rate = cells flipped beyond near-ties / cells  (default budget: <= 0.01)
    cell_flip_rate, sample_agreement (samples with no clear flip)

a near-tie being a cell whose original probability is within 0.05 of 0.5. Multi-label models
have no labels mode: they are judged by agreement with the original.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from optistudio.core.errors import DataMismatch
from optistudio.core.numerics.evaluators.base import (
    Case,
    Evaluator,
    EvaluatorInfo,
    MetricInfo,
    ModelFacts,
    OutputFacts,
    Recognition,
    TaskScore,
    TaskTally,
)
from optistudio.core.numerics.evaluators.evidence import MODERATE, STRONG, WEAK, Evidence
from optistudio.core.numerics.evaluators.outputs import (
    checked,
    is_float,
    recognized,
    shape_text,
    size,
)
from optistudio.core.numerics.evaluators.thresholds import ThresholdTally

METRICS = [
    MetricInfo(
        name="clear_positive_f1",
        label="Labels on, F1 beyond near-ties",
        higher_is_better=True,
        description="F1 of the variant's cells above 0.5 against the original's, flips where "
        "the original was within 0.05 of 0.5 not counted.",
    ),
    MetricInfo(
        name="clear_cell_flip_rate",
        label="Cell flips beyond near-ties",
        higher_is_better=False,
        description="Fraction of cells whose decision at 0.5 flipped where the original's "
        "probability was at least 0.05 from 0.5.",
    ),
    MetricInfo(
        name="cell_flip_rate",
        label="Cell flips",
        higher_is_better=False,
        description="Fraction of cells whose decision at 0.5 is not the original's.",
    ),
    MetricInfo(
        name="sample_agreement",
        label="Samples without a clear flip",
        higher_is_better=True,
        description="Fraction of samples none of whose cells flipped beyond near-ties.",
    ),
]


def _why_not(output: OutputFacts) -> str | None:
    if len(output.shape) < 2:
        return "multi-label outputs hold several values per sample, [N, K] or maps"
    return None


def _is_labels(output: OutputFacts) -> bool:
    shape = output.shape
    several = len(shape) >= 3 or (len(shape) == 2 and size(shape[1]) != 1)
    return is_float(output) and output.producer == "Sigmoid" and several


class MultilabelEvaluator(Evaluator):
    """Cells decided at 0.5 over every sigmoid output: flips and F1, near-ties apart."""

    def recognize(self, facts: ModelFacts) -> Recognition | None:
        return recognized(self.weigh(facts))

    def weigh(self, facts: ModelFacts) -> Case | None:
        found = [output for output in facts.outputs if _is_labels(output)]
        if not found:
            return None
        shown = ", ".join(f"{output.name} {shape_text(output.shape, 'N')}" for output in found)
        reason = f"{shown} after Sigmoid: a probability per label (or cell)"
        weight = max(_weight(output) for output in found)
        recognition = Recognition(
            task=self.info.name, reason=f"{reason}: multi-label", outputs=[o.name for o in found]
        )
        evidence = [Evidence(kind="structure", weight=weight, text=reason)]
        return Case(recognition=recognition, evidence=evidence + _others(facts, found))

    def for_outputs(self, facts: ModelFacts, outputs: list[str] | None = None) -> Recognition:
        chosen = super().for_outputs(facts, outputs)
        checked(self.info.name, facts, chosen.outputs, _why_not)
        return chosen

    def tally(self, recognition: Recognition, labels: Any | None = None) -> TaskTally:
        return MultilabelTally(self.info.name, recognition.outputs)

    def read_labels(self, path: Path, *, samples: int) -> Any:
        raise DataMismatch(
            "Multi-label models are judged by agreement with the original; labels are not read.",
            hint="Leave the labels out, or set another task.",
        )


def _weight(output: OutputFacts) -> float:
    """STRONG for labels [N, K]; MODERATE for maps; WEAK for a map of one channel [N, 1, H, W]."""
    if len(output.shape) == 2:
        return STRONG
    return WEAK if len(output.shape) == 4 and size(output.shape[1]) == 1 else MODERATE


def _others(facts: ModelFacts, found: list[OutputFacts]) -> list[Evidence]:
    """MODERATE evidence against when other float outputs stand beside the sigmoid ones: they
    are then one part of a larger model's (a detector's class scores beside its boxes)."""
    judged = {output.name for output in found}
    others = [o.name for o in facts.outputs if is_float(o) and o.name not in judged]
    if not others:
        return []
    text = (
        f"{len(others)} other float output(s) beside them ({', '.join(others[:3])}): the "
        "sigmoid outputs are one part of a larger model's, such as a detector's class scores"
    )
    return [Evidence(kind="structure", weight=-MODERATE, text=text)]


class MultilabelTally(ThresholdTally):
    """Cells of every judged output (`thresholds`), the multi-label metrics picked."""

    def score(self) -> TaskScore:
        if self.samples == 0:
            return self.finished({})
        rates = self.rates()
        return self.scored(
            {
                "clear_positive_f1": rates["clear_positive_f1"],
                "clear_cell_flip_rate": rates["clear_flip_rate"],
                "cell_flip_rate": rates["flip_rate"],
                "sample_agreement": rates["sample_agreement"],
            }
        )


MULTILABEL = EvaluatorInfo(
    name="multilabel",
    label="Multi-label (sigmoid per label)",
    description="Judges sigmoid outputs (a probability per label, or per cell of a map) by their "
    "decisions at 0.5: the F1 of the cells on against the original's and the fraction of cells "
    "that flipped, flips where the original was within 0.05 of 0.5 not counted.",
    metrics=METRICS,
    default_budget={"clear_positive_f1": 0.95, "clear_cell_flip_rate": 0.01},
    implementation="optistudio.core.numerics.evaluators.multilabel:MultilabelEvaluator",
    priority=55,
    input_kinds=("image", "tokens", "audio"),
)
