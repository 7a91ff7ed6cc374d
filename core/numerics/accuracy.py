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
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.backends import LoadedModel, SessionOptions, get_backend
from optistudio.core.backends.base import Precision
from optistudio.core.data.source import CalibrationSource
from optistudio.core.errors import DataMismatch, InvalidSpec, OutputsDiffer
from optistudio.core.model.info import TensorSpec
from optistudio.core.model.intake import inspect_model
from optistudio.core.numerics.evaluators.base import (
    Disagreement,
    Evaluator,
    EvaluatorInfo,
    MetricInfo,
    Recognition,
)
from optistudio.core.numerics.evaluators.outputs import output_role as role_of
from optistudio.core.numerics.evaluators.recognize import model_facts
from optistudio.core.numerics.samples import (
    Declared,
    fed_rows,
    paired_views,
    shape_note,
)
from optistudio.core.progress import ProgressCallback

SYNTHETIC_NOTE = "synthetic inputs: accuracy means agreement with the original, not task accuracy"
BUILTIN_NOTE = "built-in samples, not your data: agreement with the original on real inputs; "
UNLABELLED_NOTE = "no labels: top-1 is agreement with the original model, not task accuracy"
LABELLED_NOTE = "top-1 accuracy measured against the given labels"
NO_SIZE_LIMIT = 2**62
"""Models compared here already passed intake; its upload size cap does not apply again."""


class AccuracyReport(BaseModel):
    """The candidate's outputs compared with the reference's on the same inputs."""

    model_config = ConfigDict(extra="forbid")

    samples: int = Field(description="Samples compared (samples fed, on the inputs' batch axis).")
    data: Literal["synthetic", "user", "builtin"] = Field(
        description="Where the inputs came from: random, the user's, or built-in samples."
    )
    max_abs_error: float = Field(description="Largest |reference - candidate| over all outputs.")
    output: str = Field(default="", description="The output that cosine and top-1 judge.")
    output_role: Literal["classifier", "embedding", "other"] = Field(
        default="other",
        description="What the judged output looks like from the graph: top-1 is judged only for "
        "a classifier's output (or with labels).",
    )
    candidate_backend: str = Field(
        default="onnxruntime", description="Backend the candidate ran on."
    )
    candidate_precision: str = Field(
        default="fp32", description="Inference precision the candidate ran at, e.g. bf16."
    )
    mean_abs_error: float = Field(description="Mean |reference - candidate| over all elements.")
    mean_cosine: float = Field(description="Per-sample cosine of the first output, averaged.")
    min_cosine: float = Field(description="The worst sample's cosine of the first output.")
    top1_agreement: float | None = Field(
        default=None,
        description="Fraction of samples whose argmax over the last axis agrees; None when the "
        "first output is not [batch, classes].",
    )
    top1_accuracy_reference: float | None = Field(
        default=None, description="Top-1 accuracy of the reference against the labels."
    )
    top1_accuracy_candidate: float | None = Field(
        default=None, description="Top-1 accuracy of the candidate against the labels."
    )
    top1_drop: float | None = Field(
        default=None, description="Reference minus candidate top-1 accuracy (0.01 = 1 point)."
    )
    per_output_max_abs_error: dict[str, float] = Field(
        description="Largest absolute error of each output, by the reference's output names."
    )
    nan_or_inf: bool = Field(description="The candidate produced NaN or Inf: always a failure.")
    nonfinite_values: int = Field(default=0, description="How many NaN/Inf output elements.")
    note: str = Field(default="", description="How to read these numbers.")
    task: str | None = Field(
        default=None, description="The task the variant was judged in (an evaluator's name)."
    )
    task_reason: str = Field(default="", description="Why that task: the outputs it read.")
    task_mode: str | None = Field(
        default=None, description="agreement (with the original) or labels (against them)."
    )
    task_metrics: dict[str, float] = Field(
        default_factory=dict, description="The task's metrics by name (see its evaluator)."
    )
    task_note: str = Field(
        default="",
        description="How the task's evaluator read the outputs (their layout, what it "
        "assumed) and what it counted.",
    )
    worst: list[Disagreement] = Field(
        default_factory=list,
        description="The samples where the variant and the original disagree most.",
    )

    def metric(self, name: str) -> float | None:
        """A metric by name: the task's, or a generic one (mean_cosine, min_cosine,
        max_abs_error, mean_abs_error); None when this run did not measure it."""
        if name in self.task_metrics:
            return self.task_metrics[name]
        if name in GENERIC_METRIC_NAMES:
            value = getattr(self, name)
            return float(value) if value is not None else None
        return None


class AccuracyBudget(BaseModel):
    """How much accuracy an optimization may cost; None switches a check off."""

    model_config = ConfigDict(extra="forbid")

    max_top1_drop: float | None = Field(
        default=0.01,
        ge=0,
        le=1,
        description="Largest allowed top-1 accuracy drop (0.01 = 1 point). Without labels the "
        "top-1 disagreement with the original is used, an upper bound on the drop.",
    )
    min_cosine: float | None = Field(
        default=0.99,
        ge=-1,
        le=1,
        description="Smallest allowed mean cosine similarity to the original's first output.",
    )


GENERIC_METRICS = (
    MetricInfo(
        name="mean_cosine",
        label="Mean cosine",
        higher_is_better=True,
        unit="ratio",
        description="Per-sample cosine of the judged output to the original's, averaged.",
    ),
    MetricInfo(
        name="min_cosine",
        label="Worst cosine",
        higher_is_better=True,
        unit="ratio",
        description="The worst sample's cosine of the judged output to the original's.",
    ),
    MetricInfo(
        name="max_abs_error",
        label="Largest abs. error",
        higher_is_better=False,
        unit="value",
        description="Largest |original - variant| over every output element.",
    ),
    MetricInfo(
        name="mean_abs_error",
        label="Mean abs. error",
        higher_is_better=False,
        unit="value",
        description="Mean |original - variant| over every output element.",
    ),
)
"""Metrics every run measures, whatever its task: a budget may name them too."""
GENERIC_METRIC_NAMES = frozenset(metric.name for metric in GENERIC_METRICS)


@dataclass(frozen=True)
class TaskBudget:
    """A budget in a task's terms: limits by metric name (each metric's direction decides
    which side passes), checked against the task's metrics and the generic ones."""

    task: EvaluatorInfo
    limits: dict[str, float]
    defaulted: bool = False
    """The limits are the task's defaults (the user set none)."""

    def metric(self, name: str) -> MetricInfo:
        """The metric a limit names; InvalidSpec naming the valid ones if the task has none."""
        for metric in (*self.task.metrics, *GENERIC_METRICS):
            if metric.name == name:
                return metric
        valid = ", ".join(m.name for m in (*self.task.metrics, *GENERIC_METRICS))
        raise InvalidSpec(
            f"The {self.task.label} task has no metric {name!r}. Its metrics: {valid}.",
            hint="Name one of them in the budget, e.g. "
            f"{next(iter(self.task.default_budget), 'mean_cosine')}=LIMIT.",
        )

    def check(self) -> TaskBudget:
        """Itself, once every limit names a metric (InvalidSpec otherwise)."""
        for name in self.limits:
            self.metric(name)
        return self


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
    synthetic = bool(getattr(data, "synthetic", False))
    if labels is not None and synthetic:
        raise DataMismatch("Labels were given with synthetic inputs; they need the real data.")
    expected = _sample_count(data)
    if labels is not None and expected is not None and len(labels) != expected:
        raise DataMismatch(
            f"labels have {len(labels)} entries but the dataset has {expected} samples."
        )
    # A .tflite or an OpenVINO IR (.xml) is fed as the original (its inputs keep their names).
    like = Path(reference) if Path(candidate).suffix in (".tflite", ".xml") else None
    models = [
        _Runner(Path(reference)),
        _Runner(
            Path(candidate),
            backend=candidate_backend,
            interface=like,
            precision=candidate_precision,
        ),
    ]
    try:
        index = _output_index(models[0].output_names, output)
        role = output_role(Path(reference), models[0].output_names[index])
        tally = _Tally(
            labels,
            index=index,
            top1=labels is not None or role == "classifier",
            lenient=judge is not None,
            declared=(models[0].declared, models[1].declared),
        )
        task = judge.evaluator.tally(judge.recognition, judge.labels) if judge else None
        names, first = models[0].output_names, 0
        axes = getattr(data, "batch_axes", None)
        for batch, ref_outputs, cand_outputs in _paired_outputs(models, data, tally, progress):
            rows = fed_rows(batch, models[0].inputs, axes)
            tally.add(ref_outputs, cand_outputs, rows=rows, names=names)
            if task is not None:
                task.add_run(
                    dict(zip(names, ref_outputs, strict=True)),
                    dict(zip(names, cand_outputs, strict=True)),
                    first_sample=first,
                    samples=rows,
                )
            first += rows
    finally:
        for model in models:
            model.close()
    report = tally.report(synthetic, names=names, role=role, backend=candidate_backend)
    report = report.model_copy(update={"candidate_precision": candidate_precision})
    if getattr(data, "builtin", False):
        report = report.model_copy(update={"data": "builtin", "note": BUILTIN_NOTE + report.note})
    if task is None or judge is None:
        return report
    score = task.score()
    return report.model_copy(
        update={
            "task": score.task,
            "task_reason": judge.recognition.reason,
            "task_mode": score.mode,
            "task_metrics": score.metrics,
            "task_note": score.note,
            "worst": score.worst,
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


def within_budget(
    report: AccuracyReport, budget: AccuracyBudget, task: TaskBudget | None = None
) -> tuple[bool, str]:
    """Whether a report meets a budget, and why, in words (NaN/Inf always fails). With a
    `task` budget and a report judged in that task, its limits decide, not cosine and top-1."""
    failures: list[str] = []
    passes: list[str] = []
    if report.nan_or_inf:
        failures.append(f"the candidate produced NaN/Inf ({report.nonfinite_values} values)")
    if task is not None and report.task == task.task.name:
        _check_task(report, task, passes, failures)
    else:
        _check_generic(report, budget, passes, failures)
    if failures:
        return False, "over budget: " + "; ".join(failures)
    return True, "within budget: " + ("; ".join(passes) or "no checks enabled")


def _check_task(
    report: AccuracyReport, budget: TaskBudget, passes: list[str], failures: list[str]
) -> None:
    for name, limit in budget.limits.items():
        metric = budget.metric(name)
        value = report.metric(name)
        if value is None:
            if budget.defaulted or metric.needs_labels:
                passes.append(f"{name} not measured ({_why_unmeasured(metric)})")
            else:
                failures.append(f"{name} not measured ({_why_unmeasured(metric)})")
            continue
        ok = metric.passes(value, limit)
        (passes if ok else failures).append(
            f"{name} {_shown(value, metric)} {metric.sign(ok)} {_shown(limit, metric)}"
        )


def _why_unmeasured(metric: MetricInfo) -> str:
    return "it needs labels" if metric.needs_labels else "this run could not measure it"


def _shown(value: float, metric: MetricInfo) -> str:
    if metric.unit == "fraction":
        return f"{value:.2%}"
    if metric.unit == "points":
        return f"{value * 100:.2f} points"
    return f"{value:.5g}"


def _check_generic(
    report: AccuracyReport, budget: AccuracyBudget, passes: list[str], failures: list[str]
) -> None:
    if budget.min_cosine is not None:
        ok = report.mean_cosine >= budget.min_cosine
        sign = ">=" if ok else "<"
        (passes if ok else failures).append(
            f"mean cosine {report.mean_cosine:.5f} {sign} {budget.min_cosine}"
        )
    if budget.max_top1_drop is not None:
        _check_top1(report, budget.max_top1_drop, passes, failures)


def _check_top1(
    report: AccuracyReport, limit: float, passes: list[str], failures: list[str]
) -> None:
    if report.top1_drop is not None:
        drop, what = report.top1_drop, "top-1 drop"
    elif report.top1_agreement is not None:
        drop, what = 1 - report.top1_agreement, "top-1 disagreement (no labels; bounds the drop)"
    elif report.output_role != "classifier" and report.output:
        passes.append(
            f"top-1 not checked ({report.output} is not a classifier's output: it looks like "
            f"{'an embedding' if report.output_role == 'embedding' else 'another kind'})"
        )
        return
    else:
        passes.append("top-1 not checked (the judged output is not [batch, classes])")
        return
    ok = drop <= limit
    sign = "<=" if ok else ">"
    (passes if ok else failures).append(f"{what} {drop:.2%} {sign} {limit:.2%}")


class _Runner:
    """One model loaded on a backend (ONNX Runtime by default), with its declared input dtypes."""

    def __init__(
        self,
        path: Path,
        *,
        backend: str = "onnxruntime",
        interface: Path | None = None,
        precision: Precision = "fp32",
    ) -> None:
        info = inspect_model(interface or path, max_bytes=NO_SIZE_LIMIT)
        self.inputs: list[TensorSpec] = info.inputs
        self.dtypes = {spec.name: np.dtype(spec.dtype) for spec in info.inputs}
        self.output_names = [spec.name for spec in info.outputs]
        self.declared: list[Declared] = [spec.shape for spec in info.outputs]
        """The outputs' declared shapes: they pick a sample axis, the run's shapes decide."""
        options = SessionOptions(precision=precision)
        self.model: LoadedModel = get_backend(backend).load(path, options)

    def run(self, batch: dict[str, np.ndarray]) -> list[np.ndarray]:
        feeds = {name: _cast(array, self.dtypes.get(name)) for name, array in batch.items()}
        return [
            _as_array(name, output)
            for name, output in zip(self.output_names, self.model.run(feeds), strict=True)
        ]

    def close(self) -> None:
        self.model.close()


def _as_array(name: str, output: Any) -> np.ndarray:
    """An output as an array: a sequence of maps (scikit-learn's ZipMap, {class: probability}
    per sample) as [samples, classes] in class order, a sequence of equal tensors stacked."""
    if isinstance(output, np.ndarray):
        return output
    rows = list(output)
    if rows and all(isinstance(row, dict) for row in rows):
        return np.array([[row[key] for key in sorted(row)] for row in rows])
    try:
        return np.stack([np.asarray(row) for row in rows]) if rows else np.asarray(rows)
    except ValueError:
        raise DataMismatch(
            f"Output {name!r} is a sequence of tensors of different shapes, which cannot be "
            "compared sample by sample."
        ) from None


def _sample_count(data: CalibrationSource) -> int | None:
    return len(data) if isinstance(data, Sized) else None


def _cast(array: np.ndarray, dtype: np.dtype | None) -> np.ndarray:
    return array if dtype is None or array.dtype == dtype else array.astype(dtype)


def _paired_outputs(
    models: list[_Runner],
    data: CalibrationSource,
    tally: _Tally,
    progress: ProgressCallback | None,
) -> Iterable[tuple[dict[str, np.ndarray], list[np.ndarray], list[np.ndarray]]]:
    total = _sample_count(data)
    for batch in data.batches():
        yield batch, models[0].run(batch), models[1].run(batch)
        if progress is not None:
            fraction = min(tally.samples / total, 1.0) if total else 0.0
            progress(fraction, f"compared {tally.samples} samples")


class _OutputErrors:
    """Running absolute-error sums for one output."""

    def __init__(self) -> None:
        self.max = 0.0
        self.total = 0.0
        self.count = 0

    def add(self, error: np.ndarray) -> None:
        if error.size:
            self.max = max(self.max, float(error.max()))
            self.total += float(error.sum())
            self.count += error.size


class _Tally:
    """Running sums over batches: errors per output, cosines, top-1 counts.

    Each output is read per sample fed from its real shape (`samples.paired_views`); an output
    whose real shapes differ between the models or from the declaration (`declared`, each
    model's, by output) is named in the note. `lenient` (a task judges too): a batch whose
    outputs hold another number of values (a detector's NMS keeps a different number of boxes)
    is left to the task's evaluator; cosine and errors cover the other batches, and the note
    says how many were left out."""

    def __init__(
        self,
        labels: np.ndarray | None,
        *,
        index: int = 0,
        top1: bool = True,
        lenient: bool = False,
        declared: tuple[list[Declared], list[Declared]] = ([], []),
    ) -> None:
        self.lenient = lenient
        self.declared = declared
        self.shape_notes: dict[str, str] = {}
        self.mismatched = 0
        self.labels = labels
        self.index = index
        self.top1 = top1
        self.samples = 0
        self.errors: list[_OutputErrors] = []
        self.nonfinite = 0
        self.cosine_sum = 0.0
        self.cosine_rows = 0
        self.cosine_min = 1.0
        self.classification = True
        self.agree = 0
        self.correct = [0, 0]

    def add(
        self,
        reference: list[np.ndarray],
        candidate: list[np.ndarray],
        *,
        rows: int,
        names: list[str] | None = None,
    ) -> None:
        """One batch of both models' outputs (in the reference's order), `rows` samples fed."""
        names = names or [f"output {place}" for place in range(len(reference))]
        try:
            views = self._views(names, reference, candidate, rows)
        except OutputsDiffer:
            if not self.lenient:
                raise
            self.mismatched += 1
            self.classification = False
            return
        self._note_shapes(names, reference, candidate)
        self._add_errors(views)
        cosines = _cosines(*views[self.index])
        self.cosine_sum += float(cosines.sum())
        self.cosine_rows += len(cosines)
        self.cosine_min = min(self.cosine_min, float(cosines.min(initial=1.0)))
        self._add_top1(reference[self.index], candidate[self.index], rows)
        self.samples += rows

    def _views(
        self,
        names: list[str],
        reference: list[np.ndarray],
        candidate: list[np.ndarray],
        rows: int,
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        if len(reference) != len(candidate):
            raise OutputsDiffer(
                f"The original returns {len(reference)} outputs and the variant "
                f"{len(candidate)}; they cannot be compared.",
                hint="The variant, not your model, is at fault: use another variant.",
            )
        return [
            paired_views(name, ref, cand, rows, (self._declared(0, at), self._declared(1, at)))
            for at, (name, ref, cand) in enumerate(zip(names, reference, candidate, strict=True))
        ]

    def _declared(self, side: int, at: int) -> Declared:
        shapes = self.declared[side]
        return shapes[at] if at < len(shapes) else None

    def _note_shapes(
        self, names: list[str], reference: list[np.ndarray], candidate: list[np.ndarray]
    ) -> None:
        for at, (name, ref, cand) in enumerate(zip(names, reference, candidate, strict=True)):
            if name not in self.shape_notes:
                note = shape_note(name, self._declared(0, at), np.shape(ref), np.shape(cand))
                if note:
                    self.shape_notes[name] = note

    def _add_errors(self, views: list[tuple[np.ndarray, np.ndarray]]) -> None:
        if not self.errors:
            self.errors = [_OutputErrors() for _ in views]
        for errors, (ref64, cand64) in zip(self.errors, views, strict=True):
            finite = np.isfinite(ref64) & np.isfinite(cand64)
            self.nonfinite += int(np.count_nonzero(~np.isfinite(cand64)))
            errors.add(np.abs(ref64 - cand64)[finite])

    def _add_top1(self, reference: np.ndarray, candidate: np.ndarray, rows: int) -> None:
        """Top-1 of a [batch, classes] output, the same shape on both sides."""
        self.classification &= (
            reference.ndim == 2
            and reference.shape == candidate.shape
            and reference.shape[0] == rows
            and reference.shape[1] > 1
        )
        if not self.classification:
            return
        ref_top, cand_top = reference.argmax(axis=-1), candidate.argmax(axis=-1)
        self.agree += int(np.count_nonzero(ref_top == cand_top))
        if self.labels is not None:
            expected = self._labels_for(len(ref_top), reference.shape[1])
            self.correct[0] += int(np.count_nonzero(ref_top == expected))
            self.correct[1] += int(np.count_nonzero(cand_top == expected))

    def _labels_for(self, count: int, classes: int) -> np.ndarray:
        assert self.labels is not None
        expected = self.labels[self.samples : self.samples + count]
        if len(expected) < count:
            raise DataMismatch(
                f"labels have {len(self.labels)} entries but the dataset has more samples."
            )
        if expected.size and (expected.min() < 0 or expected.max() >= classes):
            raise DataMismatch(
                f"Labels must be class ids in [0, {classes}) for this model's output; "
                f"found {int(expected.min())}..{int(expected.max())}."
            )
        return expected

    def report(
        self,
        synthetic: bool,
        *,
        names: list[str],
        role: Literal["classifier", "embedding", "other"] = "other",
        backend: str = "onnxruntime",
    ) -> AccuracyReport:
        if self.samples == 0 and self.mismatched:
            return self._all_mismatched(synthetic, names, role, backend)
        self._check_complete()
        counted = sum(errors.count for errors in self.errors)
        top1 = self._top1_fields()
        return AccuracyReport(
            samples=self.samples,
            data="synthetic" if synthetic else "user",
            max_abs_error=max(errors.max for errors in self.errors),
            mean_abs_error=sum(errors.total for errors in self.errors) / max(counted, 1),
            output=names[self.index] if names else "",
            mean_cosine=self.cosine_sum / max(self.cosine_rows, 1),
            min_cosine=self.cosine_min,
            per_output_max_abs_error={
                name: errors.max for name, errors in zip(names, self.errors, strict=False)
            },
            nan_or_inf=self.nonfinite > 0,
            nonfinite_values=self.nonfinite,
            note=(SYNTHETIC_NOTE if synthetic else self._note())
            + self._shapes_note()
            + self._mismatch_note(),
            output_role=role,
            candidate_backend=backend,
            top1_agreement=top1.get("top1_agreement"),
            top1_accuracy_reference=top1.get("top1_accuracy_reference"),
            top1_accuracy_candidate=top1.get("top1_accuracy_candidate"),
            top1_drop=top1.get("top1_drop"),
        )

    def _all_mismatched(
        self,
        synthetic: bool,
        names: list[str],
        role: Literal["classifier", "embedding", "other"],
        backend: str,
    ) -> AccuracyReport:
        """No batch had outputs of equal shapes: the task's evaluator is the only judge."""
        return AccuracyReport(
            samples=0,
            data="synthetic" if synthetic else "user",
            max_abs_error=0.0,
            mean_abs_error=0.0,
            output=names[self.index] if names else "",
            mean_cosine=0.0,
            min_cosine=0.0,
            per_output_max_abs_error={},
            nan_or_inf=False,
            note=f"the outputs differ in shape on all {self.mismatched} batches (e.g. a "
            "different number of detections): cosine and errors are not defined; the task's "
            "metrics judge",
            output_role=role,
            candidate_backend=backend,
        )

    def _check_complete(self) -> None:
        if self.samples == 0:
            raise DataMismatch("The dataset is empty: no samples were compared.")
        if self.labels is not None and not self.classification:
            raise DataMismatch(
                "Labels were given but the model's first output is not [batch, classes], "
                "so top-1 accuracy is undefined."
            )
        if self.labels is not None and len(self.labels) != self.samples:
            raise DataMismatch(
                f"labels have {len(self.labels)} entries but the dataset has "
                f"{self.samples} samples."
            )

    def _shapes_note(self) -> str:
        if not self.shape_notes:
            return ""
        return "; " + "; ".join(self.shape_notes.values()) + " (compared per sample)"

    def _mismatch_note(self) -> str:
        if not self.mismatched:
            return ""
        return (
            f"; {self.mismatched} batch(es) left out of cosine and errors: their outputs "
            "differ in shape (e.g. a different number of detections)"
        )

    def _note(self) -> str:
        return LABELLED_NOTE if self.labels is not None else UNLABELLED_NOTE

    def _top1_fields(self) -> dict[str, float | None]:
        if not (self.classification and self.top1):
            return {}
        fields: dict[str, float | None] = {"top1_agreement": self.agree / self.samples}
        if self.labels is not None:
            reference, candidate = (count / self.samples for count in self.correct)
            fields |= {
                "top1_accuracy_reference": reference,
                "top1_accuracy_candidate": candidate,
                "top1_drop": reference - candidate,
            }
        return fields


def _check_same_outputs(reference: list[np.ndarray], candidate: list[np.ndarray]) -> None:
    ref_shapes = [list(array.shape) for array in reference]
    cand_shapes = [list(array.shape) for array in candidate]
    if ref_shapes != cand_shapes:
        raise OutputsDiffer(
            f"The outputs differ in shape: reference {ref_shapes}, candidate {cand_shapes}; "
            "they cannot be compared value by value.",
            hint="The two runs compute different things: check the backend or the variant.",
        )


def _per_sample(output: np.ndarray) -> np.ndarray:
    """[samples, features] float64 view of an output (a scalar output is one sample)."""
    rows = output.shape[0] if output.ndim else 1
    return output.astype(np.float64).reshape(rows, -1)


def _cosines(reference: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    broken = (~np.isfinite(candidate)).any(axis=1)
    finite = np.isfinite(reference) & np.isfinite(candidate)
    ref, cand = np.where(finite, reference, 0.0), np.where(finite, candidate, 0.0)
    ref_norm, cand_norm = np.linalg.norm(ref, axis=1), np.linalg.norm(cand, axis=1)
    dot = np.einsum("ij,ij->i", ref, cand)
    with np.errstate(divide="ignore", invalid="ignore"):
        cosines = np.clip(dot / (ref_norm * cand_norm), -1.0, 1.0)
    both_zero = (ref_norm == 0) & (cand_norm == 0)
    cosines = np.where(both_zero, 1.0, np.where((ref_norm == 0) | (cand_norm == 0), 0.0, cosines))
    return np.where(broken, 0.0, cosines)


def output_agreement(reference: np.ndarray, candidate: np.ndarray) -> dict[str, float | bool]:
    """How closely one output matches its reference: max abs error, error relative to the
    reference's largest magnitude, worst and mean per-sample cosine, and NaN/Inf in it."""
    _check_same_outputs([reference], [candidate])
    ref, cand = _per_sample(reference), _per_sample(candidate)
    nan_inf = bool((~np.isfinite(cand)).any())
    finite = np.isfinite(ref) & np.isfinite(cand)
    error = np.abs(ref - cand)[finite]
    max_abs = float(error.max()) if error.size else 0.0
    scale = float(np.abs(ref[np.isfinite(ref)]).max()) if np.isfinite(ref).any() else 0.0
    cosines = _cosines(ref, cand)
    return {
        "max_abs_error": max_abs,
        "max_rel_error": max_abs / scale if scale else max_abs,
        "cosine_min": float(cosines.min()) if cosines.size else 1.0,
        "cosine_mean": float(cosines.mean()) if cosines.size else 1.0,
        "nan_inf": nan_inf,
    }
