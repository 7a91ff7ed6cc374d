"""The run's judge handed to a pass that searches against it (optistudio.core.passes.judging).

It judges as the run judges a variant file (optistudio.core.numerics.accuracy.accuracy_report,
then within_budget at the variant's precision): the same batches of the run's samples, the
original's outputs on ONNX Runtime, the task's judge and its budget, the cosine budget and the
precision's numeric floor. Only the candidate's outputs come from the pass, which ran them in
memory. The original's outputs are computed once, on the first verdict, and kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from optistudio.core.data.source import CalibrationSource
from optistudio.core.numerics.accuracy import (
    AccuracyBudget,
    AccuracyReport,
    TaskBudget,
    TaskJudge,
    output_role,
    with_task,
    within_budget,
)
from optistudio.core.numerics.compared_model import ComparedModel
from optistudio.core.numerics.evaluators.base import TaskTally
from optistudio.core.numerics.output_tally import OutputTally
from optistudio.core.numerics.samples import fed_rows
from optistudio.core.passes.judging import Verdict


@dataclass
class RunJudge:
    """Auto's judge of one run's variants, on outputs (see the module docstring). `precision`
    is the tolerance rule's name for the variant judged ('int8', 'int8+bf16')."""

    model: Path
    source: CalibrationSource
    budget: AccuracyBudget
    precision: str
    task_budget: TaskBudget | None = None
    judge: TaskJudge | None = None
    labels: np.ndarray | None = None
    output: str | None = None
    _fed: list[dict[str, np.ndarray]] | None = field(default=None, repr=False)
    _reference: list[list[np.ndarray]] = field(default_factory=list, repr=False)
    _original: ComparedModel | None = field(default=None, repr=False)

    def batches(self) -> Sequence[dict[str, np.ndarray]]:
        if self._fed is None:
            self._fed = list(self.source.batches())
        return self._fed

    def verdict(self, outputs: Mapping[int, Sequence[np.ndarray]]) -> Verdict:
        """The budget's verdict on the candidate's outputs for the batches given (by batch
        number); on a part of the batches, without labels (optistudio.core.passes.judging)."""
        numbers = sorted(outputs)
        every = len(numbers) == len(self.batches())
        report = self.report({n: outputs[n] for n in numbers}, labelled=every)
        within, note = within_budget(
            report, self.budget, self.task_budget, precision=self.precision
        )
        cosines = tuple(self._cosine(n, outputs[n]) for n in numbers)
        return Verdict(within, float(report.min_cosine), note, cosines)

    def report(
        self, outputs: Mapping[int, Sequence[np.ndarray]], *, labelled: bool = True
    ) -> AccuracyReport:
        """The accuracy report the run would write for a file with these outputs (on the
        batches given, in batch order)."""
        original = self._loaded()
        names = original.output_names
        role = output_role(self.model, names[self._index()])
        labels = self.labels if labelled else None
        tally = OutputTally(
            labels,
            index=self._index(),
            top1=labels is not None or role == "classifier",
            lenient=self.judge is not None,
            declared=(original.declared, original.declared),
        )
        task = self._task_tally(labelled)
        self._add(outputs, tally, task)
        synthetic = bool(getattr(self.source, "synthetic", False))
        report = tally.report(synthetic, names=names, role=role, backend="openvino")
        if task is None or self.judge is None:
            return report
        return with_task(report, task.score(), self.judge.recognition)

    def _add(
        self,
        outputs: Mapping[int, Sequence[np.ndarray]],
        tally: OutputTally,
        task: TaskTally | None,
    ) -> None:
        """Each batch's reference and candidate outputs into the tallies, as accuracy_report."""
        original, reference = self._loaded(), self._reference_outputs()
        names, first = original.output_names, 0
        axes = getattr(self.source, "batch_axes", None)
        for number, arrays in outputs.items():
            batch, candidate = self.batches()[number], [np.asarray(a) for a in arrays]
            rows = fed_rows(batch, original.inputs, axes)
            tally.note_inputs(batch, rows)
            tally.add(reference[number], candidate, rows=rows, names=names)
            if task is not None:
                task.add_run(
                    dict(zip(names, reference[number], strict=True)),
                    dict(zip(names, candidate, strict=True)),
                    first_sample=first,
                    samples=rows,
                )
            first += rows

    def _task_tally(self, labelled: bool) -> TaskTally | None:
        if self.judge is None:
            return None
        labels = self.judge.labels if labelled else None
        return self.judge.evaluator.tally(self.judge.recognition, labels)

    def _index(self) -> int:
        names = self._loaded().output_names
        return names.index(self.output) if self.output else 0

    def _cosine(self, number: int, candidate: Sequence[np.ndarray]) -> float:
        """The batch's cosine of the judged output, flattened (1 when both are zero)."""
        ref = np.asarray(self._reference_outputs()[number][self._index()], np.float64).ravel()
        cand = np.asarray(candidate[self._index()], np.float64).ravel()
        if ref.size != cand.size or not np.isfinite(cand).all():
            return 0.0
        norms = float(np.linalg.norm(ref) * np.linalg.norm(cand))
        if norms == 0.0:
            return 1.0 if not ref.any() and not cand.any() else 0.0
        return float(ref @ cand) / norms

    def close(self) -> None:
        if self._original is not None:
            self._original.close()
            self._original = None

    def _loaded(self) -> ComparedModel:
        if self._original is None:
            self._original = ComparedModel(self.model)
        return self._original

    def _reference_outputs(self) -> list[list[np.ndarray]]:
        if not self._reference:
            original = self._loaded()
            self._reference = [original.run(batch) for batch in self.batches()]
        return self._reference
