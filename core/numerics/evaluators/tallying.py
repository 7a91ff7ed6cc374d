"""What every task's tally shares: the worst samples kept (a bounded heap), both models' outputs
taken by name and checked alike, labels sliced by sample index, and the final checks.

A tally's memory is its running sums plus `keep` disagreements (20 by default): a sample's
readings are only written out when it is worse than the best one kept.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from optistudio.core.errors import DataMismatch, OutputsDiffer
from optistudio.core.numerics.evaluators.base import Disagreement, Mode, TaskScore, TaskTally

KEEP_WORST = 20


class WorstSamples:
    """The `keep` disagreements of highest severity seen so far."""

    def __init__(self, keep: int = KEEP_WORST) -> None:
        self.keep = keep
        self._heap: list[tuple[float, int, Disagreement]] = []
        self._order = itertools.count()

    def wants(self, severity: float) -> bool:
        """Whether a sample this bad would be kept (so its readings are worth writing)."""
        if self.keep <= 0 or not severity > 0:  # 0 agrees; NaN: callers map broken to inf
            return False
        return len(self._heap) < self.keep or severity > self._heap[0][0]

    def offer(self, severity: float, make: Callable[[], Disagreement]) -> None:
        """Keep the sample `make()` describes if it is among the worst; `make` runs only then."""
        if not self.wants(severity):
            return
        entry = (severity, -next(self._order), make())
        if len(self._heap) < self.keep:
            heapq.heappush(self._heap, entry)
        else:
            heapq.heapreplace(self._heap, entry)

    def worst_first(self) -> list[Disagreement]:
        """The kept samples, worst first (ties: the earlier sample first)."""
        return [entry[2] for entry in sorted(self._heap, reverse=True)]


class BaseTally(TaskTally):
    """Sample count, worst samples and labels shared by the task tallies."""

    task = ""

    def __init__(self, labels: Sequence[Any] | np.ndarray | None, keep: int = KEEP_WORST) -> None:
        self.labels = labels
        self.samples = 0
        self.worst = WorstSamples(keep)

    @property
    def mode(self) -> Mode:
        return "agreement" if self.labels is None else "labels"

    def labels_for(self, first_sample: int, count: int) -> Sequence[Any] | np.ndarray:
        """The labels of samples first_sample .. first_sample + count - 1."""
        assert self.labels is not None
        if first_sample + count > len(self.labels):
            raise DataMismatch(
                f"labels have {len(self.labels)} entries but the data has more samples.",
                hint="Give exactly one label per sample, in the data's order.",
            )
        return self.labels[first_sample : first_sample + count]

    def finished(
        self,
        metrics: dict[str, float],
        note: str = "",
        *,
        void: str = "",
        floor_exempt: Sequence[str] = (),
    ) -> TaskScore:
        """The score, once the data is known to be complete and the labels to fit it (`void`:
        why its metrics cannot judge; `floor_exempt`: outputs read as sets, see TaskScore)."""
        if self.samples == 0:
            raise DataMismatch("The data is empty: no samples were compared.")
        if self.labels is not None and len(self.labels) != self.samples:
            raise DataMismatch(
                f"labels have {len(self.labels)} entries but the data has {self.samples} samples.",
                hint="Give exactly one label per sample, in the data's order.",
            )
        return TaskScore(
            task=self.task,
            mode=self.mode,
            samples=self.samples,
            metrics=metrics,
            worst=self.worst.worst_first(),
            note=note,
            void=void,
            floor_exempt=list(floor_exempt),
        )


def pair(
    reference: dict[str, np.ndarray],
    candidate: dict[str, np.ndarray],
    name: str,
    *,
    strict: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Both models' output `name`, which must exist and have the same shape (with `strict`
    off only the same rank: detections after NMS have as many rows as boxes found). A strict
    pair whose variant holds as many values in another shape is read in the original's shape:
    a pass re-declared the output (the simplifier flattens ddddocr's [T, 1, C] scores to the
    [1, seqlen] its graph declares), the values in the same order; were they not, they would
    disagree and the variant fail its budget, never pass it."""
    for side, outputs in (("original", reference), ("variant", candidate)):
        if name not in outputs:
            raise DataMismatch(
                f"The {side} model gave no output {name!r}; it gave {', '.join(outputs)}."
            )
    ref, cand = np.asarray(reference[name]), np.asarray(candidate[name])
    if strict and ref.shape != cand.shape and ref.size == cand.size:
        cand = cand.reshape(ref.shape)
    if ref.ndim != cand.ndim or (strict and ref.shape != cand.shape):
        raise OutputsDiffer(
            f"Output {name!r} differs in shape: original {list(ref.shape)}, variant "
            f"{list(cand.shape)}; they cannot be compared.",
            hint="The variant, not your model or data, is at fault: use another variant, or "
            "report this with the model.",
        )
    return ref, cand


def check_rank(array: np.ndarray, name: str, *ranks: int) -> None:
    """DataMismatch unless `array` has one of the ranks the task reads."""
    if array.ndim not in ranks:
        wanted = " or ".join(str(rank) for rank in ranks)
        raise DataMismatch(
            f"Output {name!r} has shape {list(array.shape)}; this task reads a rank-{wanted} "
            "output there.",
            hint="Set the task or the judged outputs by hand if recognition picked wrongly.",
        )


def class_ids(labels: np.ndarray, classes: int) -> np.ndarray:
    """`labels` when each is a class id of an output of `classes` scores; DataMismatch naming
    the range found otherwise."""
    if labels.size and (labels.min() < 0 or labels.max() >= classes):
        raise DataMismatch(
            f"Labels must be class ids in [0, {classes}) for this model's output; "
            f"found {int(labels.min())}..{int(labels.max())}."
        )
    return labels
