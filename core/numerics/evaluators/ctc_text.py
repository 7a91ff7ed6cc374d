"""CTC text recognition: a variant judged by the strings it reads.

The judged output holds per-step class scores [N, T, C] (T time steps, C classes, class 0 the
CTC blank), or [T, N, C] (time first, as PyTorch's CTC exports), or already the class id of
every step [N, T] (an ArgMax inside the model). Which axis holds the samples is read from the
arrays a run returns and the number of samples fed: [T, N, C] when axis 1, not axis 0, has that
size; [N, T, C] otherwise (also when both have it, e.g. one sample of one step). Greedy decoding
reads a string from each sample: the argmax class of every step (or the ids as given), repeats
collapsed, blanks dropped (as PaddleOCR's CTCLabelDecode does). With the model's
'character' metadata (PaddleOCR: one character per line) class k >= 1 is its (k-1)-th line and
the class after the last line is a space; without it a string is its class ids, space-separated
("3 17 5"), and so must labels be. Whether a model is a recognizer at all is weighed by
`ctc_recognition` (the outputs, the input, a 'character' list whose length fits the classes).

For reference strings r_i and variant strings c_i, with d(a, b) the edit distance (fewest
insertions, deletions and substitutions; over characters, or over ids without a charset):

    string_agreement = mean_i [c_i == r_i]                 (default budget: >= 0.95)
    clear_string_agreement = mean_i [c_i == r_i or every step whose argmax differs is a
                                     near-tie in the original]   (default budget: >= 0.99)
    cer              = sum_i d(r_i, c_i) / sum_i max(|r_i|, 1)   (character error rate of the
                                                                 variant against the original)

A step is a near-tie when the original's top two classes there are within NEAR_TIE (0.1) in
probability (`near_ties`, the classification rule): a string that changed only at such steps
was all but split in the original already (a rendered line it reads with low confidence), and
by its own probabilities the change moves each such character's chance of being right by less
than 0.1. As for classification, the default budget lets those pass up to 5 % of the strings and
clear changes up to 1 %. Class ids given by the model ([N, T], an ArgMax inside) carry no
probabilities: every change is clear. An original whose top two are exactly equal at most steps
reads its strings by rounding; the score says it is void and the numbers judge.

With label strings y_i: accuracy_m = mean_i [m_i == y_i] for each model, accuracy_drop =
accuracy_reference - accuracy_candidate (points), and cer_reference / cer_candidate, the
character error rate of each model against the labels (same formula with y_i in place of r_i).
The drill-down lists the strings read differently, both readings, the largest edit distance
relative to the original's length first.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from optistudio.core.errors import DataMismatch
from optistudio.core.numerics.evaluators.base import (
    Case,
    Disagreement,
    EvaluatorInfo,
    FedSamplesTally,
    MetricInfo,
    ModelFacts,
    OutputFacts,
    Recognition,
    TaskScore,
    TaskTally,
)
from optistudio.core.numerics.evaluators.ctc_recognition import (
    CHARSET_KEY,
    charset,
    ctc_case,
    holds_ids,
)
from optistudio.core.numerics.evaluators.near_ties import (
    EXACT_TIE,
    NEAR_TIE,
    top_two_gaps,
    void_by_ties,
)
from optistudio.core.numerics.evaluators.outputs import WeighedEvaluator, size
from optistudio.core.numerics.evaluators.tallying import BaseTally, check_rank, pair

BLANK = 0

METRICS = [
    MetricInfo(
        name="string_agreement",
        label="String agreement",
        higher_is_better=True,
        description="Fraction of samples whose decoded string is exactly the original's.",
    ),
    MetricInfo(
        name="clear_string_agreement",
        label="String agreement beyond near-ties",
        higher_is_better=True,
        description=f"Fraction of samples whose string is the original's, or differs only at "
        f"steps where the original's top two classes were within {NEAR_TIE:g} in probability.",
    ),
    MetricInfo(
        name="cer",
        label="Character error rate",
        higher_is_better=False,
        unit="ratio",
        description="Edit distance of the variant's strings to the original's, over the "
        "original's length (summed over samples).",
    ),
    MetricInfo(
        name="accuracy_reference",
        label="String accuracy (original)",
        higher_is_better=True,
        needs_labels=True,
        description="Fraction of samples the original reads exactly as labelled.",
    ),
    MetricInfo(
        name="accuracy_candidate",
        label="String accuracy (variant)",
        higher_is_better=True,
        needs_labels=True,
        description="Fraction of samples the variant reads exactly as labelled.",
    ),
    MetricInfo(
        name="accuracy_drop",
        label="String accuracy drop",
        higher_is_better=False,
        unit="points",
        needs_labels=True,
        description="Original minus variant string accuracy (0.01 = 1 point).",
    ),
    MetricInfo(
        name="cer_reference",
        label="Character error rate vs labels (original)",
        higher_is_better=False,
        unit="ratio",
        needs_labels=True,
        description="Edit distance of the original's strings to the labels, over their length.",
    ),
    MetricInfo(
        name="cer_candidate",
        label="Character error rate vs labels (variant)",
        higher_is_better=False,
        unit="ratio",
        needs_labels=True,
        description="Edit distance of the variant's strings to the labels, over their length.",
    ),
]


def _why_not(output: OutputFacts) -> str | None:
    if len(output.shape) == 2 and holds_ids(output):
        return None
    if len(output.shape) != 3:
        return "CTC scores are [N, T, C] or [T, N, C], and class ids integers [N, T]"
    classes = size(output.shape[2])
    if classes is not None and classes < 2:
        return "it has a single class per step"
    return None


class CtcTextEvaluator(WeighedEvaluator):
    """Greedy CTC decoding of both models: string agreement and character error rate."""

    why_not = staticmethod(_why_not)

    def weigh(self, facts: ModelFacts) -> Case | None:
        """Scores or ids, the input and the 'character' list weighed (`ctc_recognition`)."""
        return ctc_case(self.info.name, facts)

    def for_outputs(self, facts: ModelFacts, outputs: list[str] | None = None) -> Recognition:
        chosen = super().for_outputs(facts, outputs)
        return chosen.model_copy(update={"vocabulary": charset(facts)})

    def tally(self, recognition: Recognition, labels: Any | None = None) -> TaskTally:
        return CtcTally(recognition.outputs[0], recognition.vocabulary, labels)

    def read_labels(self, path: Path, *, samples: int) -> list[str]:
        """Label strings, one per sample: a .txt with one line each, a .json list of strings,
        or a .csv with one column (or a header row and a column named 'label'). Without the
        model's charset a label is its class ids, space-separated."""
        labels = _read_strings(Path(path))
        if len(labels) != samples:
            raise DataMismatch(
                f"labels have {len(labels)} entries but the data has {samples} samples.",
                hint="Give exactly one label string per sample, in the data's order.",
            )
        return labels


class CtcTally(FedSamplesTally, BaseTally):
    """Counts of identical strings and edit-distance sums; differing strings kept."""

    task = "ctc_text"

    def __init__(
        self, output: str, vocabulary: list[str] | None, labels: Sequence[str] | None = None
    ) -> None:
        super().__init__(labels)
        self.output = output
        self.vocabulary = vocabulary
        self.layout: StepLayout | None = None
        self.same = 0
        self.errors = 0
        self.length = 0
        self.correct = {"reference": 0, "candidate": 0}
        self.label_errors = {"reference": 0, "candidate": 0}
        self.label_length = 0
        self.near_flips = 0
        self.steps, self.tied_steps = 0, 0

    def add_fed(
        self,
        reference: dict[str, np.ndarray],
        candidate: dict[str, np.ndarray],
        first_sample: int,
        samples: int | None,
    ) -> None:
        ref, cand = pair(reference, candidate, self.output)
        check_rank(ref, self.output, 2, 3)
        if self.layout is None:
            self.layout = step_layout(ref.shape, samples)
        ref_steps, cand_steps = self._steps(ref), self._steps(cand)
        gaps = self._gaps(ref)
        expected = (
            self.labels_for(first_sample, len(ref_steps)) if self.labels is not None else None
        )
        for row, (ref_ids, cand_ids) in enumerate(zip(ref_steps, cand_steps, strict=True)):
            label = None if expected is None else self._tokens(str(expected[row]))
            near = gaps is not None and _near_tie_only(ref_ids, cand_ids, gaps[row])
            self._add_sample(
                first_sample + row, greedy_decode(ref_ids), greedy_decode(cand_ids), label, near
            )
        self.samples += len(ref_steps)

    def _steps(self, output: np.ndarray) -> np.ndarray:
        """Each sample's per-step class ids [samples, T], in the layout read on the first
        batch."""
        steps = output.argmax(axis=2) if output.ndim == 3 else np.rint(output).astype(np.int64)
        return steps.T if self.layout is not None and self.layout.time_first else steps

    def _gaps(self, output: np.ndarray) -> np.ndarray | None:
        """The original's top-two gap at each step [samples, T] (`near_ties`); None for class
        ids, which carry no probabilities. Exact ties are counted."""
        if output.ndim != 3:
            return None
        gaps = top_two_gaps(output, axis=2)
        gaps = gaps.T if self.layout is not None and self.layout.time_first else gaps
        self.steps += gaps.size
        self.tied_steps += int(np.count_nonzero(gaps <= EXACT_TIE))
        return gaps

    def _add_sample(
        self,
        sample: int,
        ref: list[int],
        cand: list[int],
        label: list[Any] | None,
        near_tie: bool = False,
    ) -> None:
        ref_tokens, cand_tokens = self._tokens_of(ref), self._tokens_of(cand)
        distance = edit_distance(ref_tokens, cand_tokens)
        self.same += ref_tokens == cand_tokens
        self.near_flips += ref_tokens != cand_tokens and near_tie
        self.errors += distance
        self.length += max(len(ref_tokens), 1)
        if label is not None:
            self._add_label(label, ref_tokens, cand_tokens)
        if distance:
            self.worst.offer(
                distance / max(len(ref_tokens), 1),
                lambda: Disagreement(
                    sample=sample,
                    reference=self._text(ref_tokens),
                    candidate=self._text(cand_tokens),
                    label=None if label is None else self._text(label),
                    severity=distance / max(len(ref_tokens), 1),
                ),
            )

    def _add_label(self, label: list[Any], ref: list[Any], cand: list[Any]) -> None:
        self.label_length += max(len(label), 1)
        for side, tokens in (("reference", ref), ("candidate", cand)):
            self.correct[side] += tokens == label
            self.label_errors[side] += edit_distance(label, tokens)

    def _tokens_of(self, ids: list[int]) -> list[Any]:
        """What a decoded string is compared as: characters with a charset, else class ids."""
        if self.vocabulary is None:
            return ids
        return [_character(self.vocabulary, index) for index in ids]

    def _tokens(self, label: str) -> list[Any]:
        """A label as the tokens decoded strings are compared as."""
        if self.vocabulary is not None:
            return list(label)
        try:
            return [int(part) for part in label.split()]
        except ValueError:
            raise DataMismatch(
                f"The label {label!r} is not a list of class ids, and the model carries no "
                f"'{CHARSET_KEY}' list to read text with.",
                hint="Give each label as its class ids separated by spaces (0 is the blank).",
            ) from None

    def _text(self, tokens: list[Any]) -> str:
        if self.vocabulary is None:
            return " ".join(str(token) for token in tokens)
        return "".join(tokens)

    def score(self) -> TaskScore:
        if self.samples == 0:
            return self.finished({})
        metrics = {
            "string_agreement": self.same / self.samples,
            "clear_string_agreement": (self.same + self.near_flips) / self.samples,
            "cer": self.errors / self.length,
        }
        if self.labels is not None:
            accuracy = {side: count / self.samples for side, count in self.correct.items()}
            metrics |= {
                "accuracy_reference": accuracy["reference"],
                "accuracy_candidate": accuracy["candidate"],
                "accuracy_drop": accuracy["reference"] - accuracy["candidate"],
                "cer_reference": self.label_errors["reference"] / self.label_length,
                "cer_candidate": self.label_errors["candidate"] / self.label_length,
            }
        void = void_by_ties(self.tied_steps, self.steps, "steps")
        return self.finished(metrics, self._note(), void=void)

    def _note(self) -> str:
        reading = (
            "strings read with the model's charset"
            if self.vocabulary is not None
            else "no charset in the model: strings are class ids"
        )
        against = "accuracy against the given labels" if self.labels is not None else "no labels"
        layout = self.layout.text if self.layout else "no output"
        note = f"greedy CTC decoding (blank = class 0) of {layout}; {reading}; {against}"
        if self.near_flips:
            note += (
                f"; {self.near_flips} string(s) changed only at near-tie steps (the original's "
                f"top two within {NEAR_TIE:g} in probability)"
            )
        return note


class StepLayout(NamedTuple):
    """Where an output's samples are (time first or not), and that layout in words."""

    time_first: bool
    text: str


def step_layout(shape: tuple[int, ...], samples: int | None) -> StepLayout:
    """How an output of real `shape` holds its steps, with `samples` fed (module docstring)."""
    time_first = samples is not None and len(shape) >= 2 and shape[1] == samples != shape[0]
    if len(shape) == 2:
        ids = "[T, N]" if time_first else "[N, T]"
        return StepLayout(time_first, f"class ids {ids} (argmax inside the model)")
    return StepLayout(time_first, "scores [T, N, C]" if time_first else "scores [N, T, C]")


def _near_tie_only(ref: np.ndarray, cand: np.ndarray, gaps: np.ndarray) -> bool:
    """Whether the steps whose class differs are all near-ties in the original (some differ)."""
    differ = ref != cand
    return bool(differ.any()) and bool((gaps[differ] < NEAR_TIE).all())


def greedy_decode(steps: np.ndarray) -> list[int]:
    """Class ids read from per-step argmaxes: repeats collapsed, then blanks (0) dropped."""
    if steps.size == 0:
        return []
    keep = np.ones(len(steps), dtype=bool)
    keep[1:] = steps[1:] != steps[:-1]
    keep &= steps != BLANK
    return [int(index) for index in steps[keep]]


def _character(vocabulary: list[str], index: int) -> str:
    """Class `index`'s character: PaddleOCR puts the blank first and a space after the list."""
    if 1 <= index <= len(vocabulary):
        return vocabulary[index - 1]
    return " " if index == len(vocabulary) + 1 else f"<{index}>"


def edit_distance(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Levenshtein distance: the fewest insertions, deletions and substitutions from a to b."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, item in enumerate(a, start=1):
        current = [i]
        for j, other in enumerate(b, start=1):
            current.append(
                min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (item != other))
            )
        previous = current
    return previous[-1]


def _read_strings(path: Path) -> list[str]:
    """Strings from a .txt (one per line), a .json list or a .csv (see `read_labels`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataMismatch(
            f"The labels file {path.name} cannot be read as UTF-8 text ({type(exc).__name__}).",
            hint="Give label strings as a UTF-8 .txt (one per line), .json list or .csv.",
        ) from None
    suffix = path.suffix.lower()
    if suffix == ".json":
        return _json_strings(text, path.name)
    if suffix == ".csv":
        return _csv_strings(text, path.name)
    return text.splitlines()


def _json_strings(text: str, name: str) -> list[str]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise DataMismatch(
            f"The labels file {name} is not a JSON list of strings.",
            hint='Write one string per sample: ["HELLO", "WORLD"].',
        )
    return value


def _csv_strings(text: str, name: str) -> list[str]:
    rows = list(csv.reader(text.splitlines()))
    if rows and "label" in rows[0]:
        column = rows[0].index("label")
        return [row[column] if column < len(row) else "" for row in rows[1:]]
    if any(len(row) > 1 for row in rows):
        raise DataMismatch(
            f"The labels file {name} has several columns and none is called 'label'.",
            hint="Give one column, or name the label column 'label' in a header row.",
        )
    return [row[0] if row else "" for row in rows]


CTC_TEXT = EvaluatorInfo(
    name="ctc_text",
    label="Text recognition (CTC)",
    description="Judges a text recognizer by the strings it reads: greedy CTC decoding of both "
    "models, the fraction of strings read identically and the character error rate; with label "
    "strings each model's accuracy and the drop. The drill-down lists the strings read "
    "differently, with both readings.",
    metrics=METRICS,
    default_budget={"clear_string_agreement": 0.99, "string_agreement": 0.95},
    labels_budget={"accuracy_drop": 0.01},
    implementation="optistudio.core.numerics.evaluators.ctc_text:CtcTextEvaluator",
    priority=30,
)
