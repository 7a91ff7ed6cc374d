"""How far an optimized model's outputs are from the original's, on streamed input batches.

For every sample i fed, with r_i and c_i the reference's and the candidate's judged output for
it flattened to float64 vectors (`samples.sample_view`: read from the shape the run returned, not
the declared one; a batch of one sample is one vector whatever its shape):

    cosine_i = r_i . c_i / (|r_i| |c_i|)     (1 when both are zero, 0 when only one is)

mean_cosine and min_cosine are taken over samples. Absolute errors |r - c| cover every element
of every output. Outputs of other shapes holding the same values per sample (a declared
[1, T] returned as [2, 1, T/2] by one model and [1, T] by the other) compare value by value, and
the note names them; another number of values is `OutputsDiffer`, the variant's fault, not the
user's. A first output shaped [batch, classes] also gets top-1 agreement, the fraction
of samples where argmax r_i == argmax c_i, and with labels the top-1 accuracy of each model.
Only running sums are kept, so memory is bounded by one batch.

Top-1 is only judged where it means something: with labels, or when the judged output is a
classifier's (made by a Softmax / LogSoftmax / Sigmoid, a softmax written as Exp / ReduceSum /
Div included, or a linear head: Gemm, MatMul, MatMul + bias; read from the graph as task
recognition reads it, `evaluators.recognize.model_facts`). An embedding ([batch, dims] made by pooling or normalization, e.g. MiniLM's
sentence_embedding) has an argmax too, but its agreement says nothing, so it is not computed.

The candidate can run on another backend (e.g. an NNCF model on OpenVINO, whose INT8 kernels are
what a deployment gets); the reference always runs on ONNX Runtime's CPU provider.

Any NaN or Inf in the candidate's outputs sets `nan_or_inf`, a failure whatever the other numbers
say; non-finite elements are left out of the error sums and their sample's cosine counts as 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from optistudio.core.backends.base import Precision
from optistudio.core.data.source import CalibrationSource
from optistudio.core.errors import DataMismatch
from optistudio.core.numerics.accuracy_report import BUILTIN_NOTE as BUILTIN_NOTE
from optistudio.core.numerics.accuracy_report import GENERIC_METRIC_NAMES as GENERIC_METRIC_NAMES
from optistudio.core.numerics.accuracy_report import GENERIC_METRICS as GENERIC_METRICS
from optistudio.core.numerics.accuracy_report import LABELLED_NOTE as LABELLED_NOTE
from optistudio.core.numerics.accuracy_report import SYNTHETIC_NOTE as SYNTHETIC_NOTE
from optistudio.core.numerics.accuracy_report import UNLABELLED_NOTE as UNLABELLED_NOTE
from optistudio.core.numerics.accuracy_report import AccuracyReport as AccuracyReport
from optistudio.core.numerics.budget import AccuracyBudget as AccuracyBudget
from optistudio.core.numerics.budget import TaskBudget as TaskBudget
from optistudio.core.numerics.budget import within_budget as within_budget
from optistudio.core.numerics.compared_model import NO_SIZE_LIMIT as NO_SIZE_LIMIT
from optistudio.core.numerics.compared_model import ComparedModel
from optistudio.core.numerics.evaluators.base import Evaluator, Recognition, TaskScore, TaskTally
from optistudio.core.numerics.evaluators.outputs import output_role as role_of
from optistudio.core.numerics.evaluators.recognize import model_facts
from optistudio.core.numerics.output_agreement import output_agreement as output_agreement
from optistudio.core.numerics.output_tally import OutputTally
from optistudio.core.numerics.samples import fed_rows
from optistudio.core.progress import ProgressCallback


@dataclass(frozen=True)
class TaskJudge:
    """How a run judges variants in a task's terms: the evaluator, what it judges, labels."""

    evaluator: Evaluator
    recognition: Recognition
    labels: Any | None = None


def accuracy_report(
    reference: Path,
    candidate: Path,
    data: CalibrationSource,
    *,
    labels: np.ndarray | None = None,
    progress: ProgressCallback | None = None,
    output: str | None = None,
    candidate_backend: str = "onnxruntime",
    judge: TaskJudge | None = None,
    candidate_precision: Precision = "fp32",
) -> AccuracyReport:
    """Run both models on every batch of `data` and compare outputs (the reference on ONNX
    Runtime's CPU provider, the candidate on `candidate_backend` at `candidate_precision`);
    with a `judge`, also in the task's own terms (its metrics and the samples where the two
    disagree most).

    Feeds are cast to each model's declared input dtypes, so an FP16 candidate with float16
    inputs gets the same data. Labels need user data and a [batch, classes] first output.
    """
    synthetic = _checked_synthetic(data, labels)
    models = _load_pair(Path(reference), Path(candidate), candidate_backend, candidate_precision)
    try:
        index = _output_index(models[0].output_names, output)
        names = models[0].output_names
        role = output_role(Path(reference), names[index])
        tally = OutputTally(
            labels,
            index=index,
            top1=labels is not None or role == "classifier",
            lenient=judge is not None,
            declared=(models[0].declared, models[1].declared),
        )
        task = judge.evaluator.tally(judge.recognition, judge.labels) if judge else None
        _compare(models, data, tally, task, progress)
    finally:
        for model in models:
            model.close()
    report = tally.report(synthetic, names=names, role=role, backend=candidate_backend)
    report = report.model_copy(update={"candidate_precision": candidate_precision})
    if getattr(data, "builtin", False):
        report = report.model_copy(update={"data": "builtin", "note": BUILTIN_NOTE + report.note})
    if task is None or judge is None:
        return report
    return with_task(report, task.score(), judge.recognition)


def _checked_synthetic(data: CalibrationSource, labels: np.ndarray | None) -> bool:
    """Whether `data` is synthetic; DataMismatch for labels that cannot go with it."""
    synthetic = bool(getattr(data, "synthetic", False))
    if labels is not None and synthetic:
        raise DataMismatch("Labels were given with synthetic inputs; they need the real data.")
    expected = _sample_count(data)
    if labels is not None and expected is not None and len(labels) != expected:
        raise DataMismatch(
            f"labels have {len(labels)} entries but the dataset has {expected} samples."
        )
    return synthetic


def _load_pair(
    reference: Path, candidate: Path, backend: str, precision: Precision
) -> list[ComparedModel]:
    """The reference on ONNX Runtime and the candidate on `backend`; a .tflite or an OpenVINO
    IR (.xml) is fed as the original (its inputs keep their names)."""
    like = reference if candidate.suffix in (".tflite", ".xml") else None
    return [
        ComparedModel(reference),
        ComparedModel(candidate, backend=backend, interface=like, precision=precision),
    ]


def _compare(
    models: list[ComparedModel],
    data: CalibrationSource,
    tally: OutputTally,
    task: TaskTally | None,
    progress: ProgressCallback | None,
) -> None:
    """Every batch of `data` through both models, into the output tally and the task's."""
    names, first = models[0].output_names, 0
    axes = getattr(data, "batch_axes", None)
    for batch, ref_outputs, cand_outputs in _paired_outputs(models, data, tally, progress):
        rows = fed_rows(batch, models[0].inputs, axes)
        tally.note_inputs(batch, rows)
        tally.add(ref_outputs, cand_outputs, rows=rows, names=names)
        if task is not None:
            task.add_run(
                dict(zip(names, ref_outputs, strict=True)),
                dict(zip(names, cand_outputs, strict=True)),
                first_sample=first,
                samples=rows,
            )
        first += rows


def with_task(report: AccuracyReport, score: TaskScore, recognition: Recognition) -> AccuracyReport:
    """The report with the task's score on it: its metrics, worst samples and why they cannot
    judge (ties), the outputs it reads as sets left out of the numeric floor."""
    floors = {
        name: floor.model_copy(update={"floored": False}) if name in score.floor_exempt else floor
        for name, floor in report.output_floors.items()
    }
    return report.model_copy(
        update={
            "task": score.task,
            "task_reason": recognition.reason,
            "task_mode": score.mode,
            "task_metrics": score.metrics,
            "task_note": score.note,
            "worst": score.worst,
            "task_confidence": recognition.confidence,
            "task_void": score.void,
            "output_floors": floors,
        }
    )


def output_role(model: Path, name: str) -> Literal["classifier", "embedding", "other"]:
    """Guess from the graph what an output is: what node made it (see the module docstring)."""
    found = [output for output in model_facts(model).outputs if output.name == name]
    return role_of(found[0]) if found else "other"


def _output_index(names: list[str], output: str | None) -> int:
    """Which output cosine and top-1 judge: the named one, else the first."""
    if output is None:
        return 0
    if output not in names:
        raise DataMismatch(f"The model has no output {output!r}. Its outputs: {', '.join(names)}.")
    return names.index(output)


def _sample_count(data: CalibrationSource) -> int | None:
    return len(data) if isinstance(data, Sized) else None


def _paired_outputs(
    models: list[ComparedModel],
    data: CalibrationSource,
    tally: OutputTally,
    progress: ProgressCallback | None,
) -> Iterable[tuple[dict[str, np.ndarray], list[np.ndarray], list[np.ndarray]]]:
    total = _sample_count(data)
    for batch in data.batches():
        yield batch, models[0].run(batch), models[1].run(batch)
        if progress is not None:
            fraction = min(tally.samples / total, 1.0) if total else 0.0
            progress(fraction, f"compared {tally.samples} samples")
