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
from optistudio.core.numerics.accuracy_report import BUILTIN_NOTE as BUILTIN_NOTE
from optistudio.core.numerics.accuracy_report import GENERIC_METRIC_NAMES as GENERIC_METRIC_NAMES
from optistudio.core.numerics.accuracy_report import GENERIC_METRICS as GENERIC_METRICS
from optistudio.core.numerics.accuracy_report import LABELLED_NOTE as LABELLED_NOTE
from optistudio.core.numerics.accuracy_report import SYNTHETIC_NOTE as SYNTHETIC_NOTE
from optistudio.core.numerics.accuracy_report import UNLABELLED_NOTE as UNLABELLED_NOTE
from optistudio.core.numerics.accuracy_report import AccuracyReport as AccuracyReport
from optistudio.core.numerics.evaluators.base import (
    Evaluator,
    EvaluatorInfo,
    MetricInfo,
    Recognition,
    TaskScore,
)
from optistudio.core.numerics.evaluators.outputs import output_role as role_of
from optistudio.core.numerics.evaluators.recognize import model_facts
from optistudio.core.numerics.numeric_floor import FLOOR_SNR_DB, all_constant, check_floor
from optistudio.core.numerics.numeric_floor import cosines as numeric_cosines
from optistudio.core.numerics.output_tally import OutputTally
from optistudio.core.numerics.samples import Declared, fed_rows
from optistudio.core.numerics.tolerances import floor_for
from optistudio.core.progress import ProgressCallback

NO_SIZE_LIMIT = 2**62
"""Models compared here already passed intake; its upload size cap does not apply again."""


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
    floor_snr_db: float | None = Field(
        default=FLOOR_SNR_DB,
        le=100,
        description="The numeric floor: the smallest worst-sample SNR (dB) of every float "
        "output against the original's, kept whatever the task's metrics say "
        "(optistudio.core.numerics.numeric_floor); None switches it off, for models whose "
        "outputs vary from run to run.",
    )


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
        tally = OutputTally(
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


def within_budget(
    report: AccuracyReport,
    budget: AccuracyBudget,
    task: TaskBudget | None = None,
    *,
    precision: str | None = None,
) -> tuple[bool, str]:
    """Whether a report meets a budget, and why, in words (NaN/Inf always fails). Every verdict
    keeps the numeric floor (each float output's worst-sample SNR, `numeric_floor`), which no
    task metric overrides; for a variant computing in `precision` ('bf16', 'int8+bf16') the
    floor is that precision's rule where it is stricter than the budget's
    (`optistudio.core.numerics.tolerances`, the rule bench's output check holds too). With a `task` budget and a report judged in that task its limits
    decide, not cosine and top-1, unless the task's metrics cannot judge this model
    (`numeric_reason`): then the cosine budget decides and the task's metrics stand beside."""
    failures: list[str] = []
    passes: list[str] = []
    if report.nan_or_inf:
        failures.append(f"the candidate produced NaN/Inf ({report.nonfinite_values} values)")
    floor_db, rule = floor_for(precision, budget.floor_snr_db)
    floor_passes, floor_failures = check_floor(report.output_floors, floor_db, rule)
    failures += floor_failures
    in_task = task is not None and report.task == task.task.name
    numeric = numeric_reason(report, task)
    if task is not None and in_task and not numeric:
        _check_task(report, task, passes, failures)
    else:
        void = bool(report.task_void) or all_constant(report.constant_outputs, report.output_floors)
        _check_generic(report, budget, passes, failures, top1=not void)
    passes += floor_passes
    said = [f"judged numerically: {numeric}{_beside(report, task if in_task else None)}"]
    said = said if numeric else []
    if failures:
        return False, "over budget: " + "; ".join(failures + said)
    return True, "within budget: " + ("; ".join(passes + said) or "no checks enabled")


def numeric_reason(report: AccuracyReport, task: TaskBudget | None) -> str:
    """Why the task's metrics cannot judge this report's model, so that the numbers do (the
    original's outputs constant or tied, or a task recognized with low confidence and no
    limits set by the user); '' when they can."""
    if all_constant(report.constant_outputs, report.output_floors):
        return (
            "the original's outputs are the same for every input, so no task metric means anything"
        )
    if report.task_void:
        return report.task_void
    low = report.task_confidence == "low" and task is not None and task.defaulted
    if low and task is not None and report.task == task.task.name:
        return (
            f"{task.task.label} was recognized with low confidence, so the output cosine and "
            "the numeric floor decide"
        )
    return ""


def _beside(report: AccuracyReport, task: TaskBudget | None) -> str:
    """'; the task's metrics beside it: string_agreement 97.00% (limit 99.00%)' or ''."""
    if task is None:
        return ""
    shown = []
    for name, limit in task.limits.items():
        metric, value = task.metric(name), report.metric(name)
        if value is not None:
            shown.append(f"{name} {_shown(value, metric)} (limit {_shown(limit, metric)})")
    return f"; the task's metrics beside it, not deciding: {', '.join(shown)}" if shown else ""


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
    report: AccuracyReport,
    budget: AccuracyBudget,
    passes: list[str],
    failures: list[str],
    *,
    top1: bool = True,
) -> None:
    if budget.min_cosine is not None:
        ok = report.mean_cosine >= budget.min_cosine
        sign = ">=" if ok else "<"
        (passes if ok else failures).append(
            f"mean cosine {report.mean_cosine:.5f} {sign} {budget.min_cosine}"
        )
    if budget.max_top1_drop is not None and top1:
        _check_top1(report, budget.max_top1_drop, passes, failures)
    elif budget.max_top1_drop is not None:
        passes.append("top-1 not checked (the original's own outputs tie or never change)")


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
    tally: OutputTally,
    progress: ProgressCallback | None,
) -> Iterable[tuple[dict[str, np.ndarray], list[np.ndarray], list[np.ndarray]]]:
    total = _sample_count(data)
    for batch in data.batches():
        yield batch, models[0].run(batch), models[1].run(batch)
        if progress is not None:
            fraction = min(tally.samples / total, 1.0) if total else 0.0
            progress(fraction, f"compared {tally.samples} samples")


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
    cosines = numeric_cosines(ref, cand)
    return {
        "max_abs_error": max_abs,
        "max_rel_error": max_abs / scale if scale else max_abs,
        "cosine_min": float(cosines.min()) if cosines.size else 1.0,
        "cosine_mean": float(cosines.mean()) if cosines.size else 1.0,
        "nan_inf": nan_inf,
    }
