"""What the Optimize page does, as plain functions that tests call without Streamlit.

The form's defaults come from the spec's own fields (`OptimizeJobSpec`), never typed again here:
the accuracy budget's, and the timing of each variant (its least seconds; it may time up to
TIMING_CAP_FACTOR times as long). Submitting stores the data files, checks them against the
model, builds the spec and sends it (the page routes it by the optimize kind's target rule).
Training data for quantization-aware training is stored the same way and recorded in the qat
pass's settings; the worker reads its own copy (workers.optimize_job.local_training).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, BinaryIO

import pandas as pd
from pydantic import BaseModel
from sqlalchemy.orm import Session, sessionmaker

from optistudio.core.data.datasets import load_labels, open_dataset
from optistudio.core.data.images import ImagePreprocessing
from optistudio.core.errors import DataMismatch, ErrorInfo
from optistudio.core.llm.folder import is_decoder_file
from optistudio.core.model.info import ModelInfo
from optistudio.core.numerics.accuracy import AccuracyBudget
from optistudio.core.numerics.evaluators.base import EvaluatorInfo, evaluators
from optistudio.core.numerics.evaluators.recognize import model_facts, read_task
from optistudio.core.optimize.provenance import judged_on_random, samples_label
from optistudio.core.optimize.recipes import ANY
from optistudio.core.optimize.run import NO_TASK
from optistudio.core.optimize.variant import VariantResult
from optistudio.core.passes.base import PassInfo
from optistudio.core.passes.qat import QAT_RECIPE, QatConfig
from optistudio.core.report.metric_info import label_of
from optistudio.db.models import Job, JobKind
from optistudio.db.session import transaction
from optistudio.services.catalog import store_dataset
from optistudio.services.jobkinds import OPTIMIZE, OptimizeJobSpec
from optistudio.services.jobresults import OptimizeJobResult
from optistudio.services.settings import Settings
from optistudio.studio.decoder_rows import (
    DECODER_NUMBERS,
    SHOWN_METRICS,
    decoder_figures,
    is_decoder_run,
)
from optistudio.studio.formatting import EMPTY, cell, readable_frame
from optistudio.studio.jobs_services import SendTask, finished_of, job_view, submit_job
from optistudio.studio.optimize_run import OptimizeRun

log = logging.getLogger(__name__)

TIMING_CAP_FACTOR = 10
"""A variant is timed for at least `seconds` and at most this many times as long."""
TOP1_TASKS = frozenset({None, "classification"})
"""Tasks whose variants are read by top-1 (no task: cosine and top-1); a detector's or a text
recognizer's table and form leave top-1 out."""
NO_TASK_BUDGET = "none: no task, so the cosine and top-1 budget below judges"
"""The budget box's placeholder when no task judges the model: a budget in task metrics needs a
task (the run refuses one without), so no other task's metrics are suggested."""
VARIANT_NUMBERS = {
    "speedup": "{:.2f}x",
    "mean cosine": "{:.4f}",
    "top-1 agreement": "{:.3f}",
    "top-1 drop": "{:.3f}",
    "variant p50 (ms)": "{:.3f}",
}
TOP1_COLUMNS = ("top-1 agreement", "top-1 drop")
TEXT_DATA = (".txt", ".npy")
"""A decoder's data: a text, or its token ids; the worker's decoder run reads and checks it."""


@dataclass(frozen=True)
class OptimizeForm:
    """What the Optimize page's form holds (its defaults are the spec's)."""

    recipes: list[str]
    target: str = ANY
    min_cosine: float | None = None
    max_top1_drop: float | None = None
    seconds: float | None = None
    pass_settings: dict[str, dict[str, Any]] | None = None
    accuracy_output: str | None = None
    image_preprocessing: ImagePreprocessing | None = None
    task: str | None = None
    budgets: str = ""
    speed_only: bool = False
    epochs: int | None = None


@dataclass(frozen=True)
class FormDefaults:
    min_cosine: float | None
    max_top1_drop: float | None
    seconds: float
    epochs: int


def form_defaults() -> FormDefaults:
    """The form's first values: those of a spec that sets nothing."""
    spec = OptimizeJobSpec()
    return FormDefaults(
        min_cosine=spec.budget.min_cosine,
        max_top1_drop=spec.budget.max_top1_drop,
        seconds=spec.comparison.min_seconds,
        epochs=QatConfig.model_fields["epochs"].default,
    )


def task_choices() -> dict[str, str]:
    """The task picker's options: '' (recognize), each evaluator, 'none' (cosine, top-1)."""
    return (
        {"": "Recognize from the outputs"}
        | {info.name: info.label for info in evaluators}
        | {NO_TASK: "None: cosine and top-1 only"}
    )


def task_table() -> list[dict[str, str]]:
    """Each task's metrics, their direction and its default budget, for the page to show."""
    rows = []
    for info in evaluators:
        for metric in info.metrics:
            default = info.default_budget.get(metric.name)
            labelled = info.labels_budget.get(metric.name)
            rows.append(
                {
                    "task": info.label,
                    "metric": metric.name,
                    "better": "higher" if metric.higher_is_better else "lower",
                    "default limit": "" if default is None else f"{default:g}",
                    "default with labels": "" if labelled is None else f"{labelled:g}",
                    "needs labels": "yes" if metric.needs_labels else "",
                    "what it is": metric.description,
                }
            )
    return rows


def parse_budgets(text: str) -> dict[str, float]:
    """'string_agreement=0.99, cer=0.01' -> limits by metric; DataMismatch names a bad one."""
    limits = {}
    for part in (p.strip() for p in text.replace(";", ",").split(",")):
        if not part:
            continue
        name, sep, limit = part.partition("=")
        try:
            limits[name.strip()] = float(limit)
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise DataMismatch(
                f"Bad budget {part!r}: write METRIC=LIMIT, e.g. string_agreement=0.99."
            )
    return limits


def budget_help() -> dict[str, str]:
    """The accuracy budget's field descriptions, for the widgets' help."""
    return {name: field.description or "" for name, field in AccuracyBudget.model_fields.items()}


def build_spec(
    settings: Settings,
    info: ModelInfo,
    form: OptimizeForm,
    data: BinaryIO | None = None,
    labels: BinaryIO | None = None,
    *,
    train: BinaryIO | None = None,
    train_labels: BinaryIO | None = None,
) -> OptimizeJobSpec:
    """Store the data files, check them against the model, and build the job spec.

    `train` / `train_labels` are the qat recipe's training inputs and class ids, kept apart
    from the evaluation data. Unset form fields keep the spec's defaults; pydantic's
    ValidationError or DataMismatch say what is wrong."""
    _check_output(info, form.accuracy_output)
    preprocessing = form.image_preprocessing if data and _is_zip(data) else None
    data_path = store_dataset(settings, data, filename=data.name) if data else None
    labels_path = store_dataset(settings, labels, filename=labels.name) if labels else None
    if data_path and data_path.suffix.lower() not in TEXT_DATA:
        dataset = open_dataset(data_path, info.inputs, preprocessing=preprocessing)
        if labels_path and labels_path.suffix.lower() == ".npy" and form.task in (None, ""):
            load_labels(labels_path, samples=len(dataset))  # class ids; others: the evaluator
    fields: dict[str, Any] = {
        "recipes": form.recipes,
        "target_backend": form.target,
        "accuracy_output": form.accuracy_output,
        "image_preprocessing": preprocessing,
        "data_path": str(data_path) if data_path else None,
        "labels_path": str(labels_path) if labels_path else None,
        "budget": _given(min_cosine=form.min_cosine, max_top1_drop=form.max_top1_drop),
        "task": form.task or None,
        "budgets": parse_budgets(form.budgets),
        "speed_only": form.speed_only,
    }
    if form.seconds is not None:
        fields["comparison"] = {
            "min_seconds": form.seconds,
            "max_seconds": TIMING_CAP_FACTOR * form.seconds,
        }
    qat = training_settings(settings, info, form, train, train_labels)
    if form.pass_settings is not None or qat:
        fields["pass_settings"] = (form.pass_settings or {}) | qat
    return OptimizeJobSpec.model_validate(fields)


def training_settings(
    settings: Settings,
    info: ModelInfo,
    form: OptimizeForm,
    train: BinaryIO | None,
    train_labels: BinaryIO | None,
) -> dict[str, dict[str, Any]]:
    """{'qat': ...} with the stored training files (checked against the model) and the
    epochs, or {} without training data; DataMismatch when qat is asked for without it."""
    if not train:
        if train_labels:
            raise DataMismatch(
                "Training labels need the training inputs they label: upload the training "
                "data for QAT too."
            )
        if QAT_RECIPE in form.recipes:
            raise DataMismatch(
                "The qat recipe needs training data: upload an .npz or a .zip of images under "
                "'Training data for QAT'."
            )
        return {}
    preprocessing = form.image_preprocessing if _is_zip(train) else None
    train_path = store_dataset(settings, train, filename=train.name)
    labels_path = (
        store_dataset(settings, train_labels, filename=train_labels.name) if train_labels else None
    )
    try:
        dataset = open_dataset(train_path, info.inputs, preprocessing=preprocessing)
        if labels_path:
            load_labels(labels_path, samples=len(dataset))  # class ids, one per sample
    except DataMismatch as exc:
        raise DataMismatch(f"Training data for QAT: {exc.message}", hint=exc.hint) from None
    qat: dict[str, Any] = {"train_path": str(train_path)}
    if labels_path:
        qat["train_labels_path"] = str(labels_path)
    if preprocessing:
        qat["image_preprocessing"] = preprocessing.model_dump(mode="json")
    if form.epochs is not None:
        qat["epochs"] = form.epochs
    return {QAT_RECIPE: qat}


def submit_optimization(
    factory: sessionmaker[Session], *, spec: OptimizeJobSpec, model_id: int, send: SendTask
) -> int:
    """Commit an optimize job for the model, then send it."""
    return submit_job(factory, kind=JobKind.optimize, model_id=model_id, spec=spec, send=send)


def optimization_runs(
    factory: sessionmaker[Session], *, model_id: int | None = None, limit: int = 10
) -> list[OptimizeRun]:
    """Finished optimize jobs (of `model_id` when given), newest first: the original's name, the
    headline, one row per variant and the failed variants' errors (a job whose stored result no
    longer reads is left out, and logged). The message loses the headline it ends with, which
    the page shows apart."""
    with transaction(factory) as s:
        jobs = [
            (job, OPTIMIZE.read_result(job.result))
            for job in finished_of(s, kind=JobKind.optimize, model_id=model_id, limit=limit)
        ]
        return [_run(job, result) for job, result in jobs if result is not None]


def _run(job: Job, result: OptimizeJobResult) -> OptimizeRun:
    said = result.said()
    decoder = is_decoder_run(list(result.variants))
    return OptimizeRun(
        job=job_view(job, result),
        message=job.message.removesuffix(said).strip(),
        headline=said,
        data=result.data,
        variants=variant_rows(result),
        failures=variant_failures(result),
        not_applicable=not_applicable(result),
        notes=list(result.notes),
        not_your_data=not_your_data(result),
        inputs="" if decoder else fed_inputs(job.spec or {}),  # a decode loop feeds it
        task=task_line(result),
        task_name=result.task,
        task_metrics=list(result.task_budget),
        task_reasons=task_reasons(result),
        drilldown=drilldown(result),
        decoder=decoder,
    )


def fed_inputs(spec: dict[str, Any]) -> str:
    """What the variants were timed on, as the job row records it (its own settings with the
    model's input profile under them): 'shapes x=[1, 3, 48, 320]; dims x.3=320; values sr=16000'."""
    parts = []
    for field, name in (("shapes", "shapes"), ("dims", "dims"), ("values", "values")):
        given = spec.get(field) or {}
        if given:
            parts.append(f"{name} " + ", ".join(f"{key}={value}" for key, value in given.items()))
    if spec.get("inputs_file"):
        parts.append("arrays from the user's file")
    return "; ".join(parts)


def task_line(result: OptimizeJobResult) -> str:
    """'Judged as ctc_text ([N, 40, 6625] after Softmax...); budget string_agreement >= 0.99'."""
    if not result.task:
        return f"Judged by output cosine and top-1 ({result.task_reason or 'no task set'})."
    limits = ", ".join(f"{name}={limit:g}" for name, limit in result.task_budget.items())
    sure = f" ({result.task_confidence} confidence)" if result.task_confidence else ""
    return f"Judged as {result.task}{sure}: {result.task_reason}. Budget: {limits}."


def task_reasons(result: OptimizeJobResult) -> list[str]:
    """The evidence recognition weighed for the task (none when the user set it), or what
    each task's case lacked when none was recognized; each with its weight."""
    if result.task:
        return list(result.task_reasons) if result.task_confidence else []
    return list(result.task_reasons[1:])  # the first is the task line's


def drilldown(result: OptimizeJobResult) -> list[dict[str, Any]]:
    """Per made variant with disagreements, the samples where it and the original part most:
    {'recipe': label, 'rows': [{'sample', 'original', 'variant', 'label', 'severity'}]}."""
    out = []
    for v in result.variants:
        worst = v.accuracy.worst if v.accuracy else []
        if worst:
            rows = [
                {
                    "sample": d.sample,
                    "original": d.reference,
                    "variant": d.candidate,
                    "label": d.label or "",
                    "how far": round(d.severity, 4),
                }
                for d in worst
            ]
            out.append({"recipe": v.recipe.label, "rows": rows})
    return out


def variant_rows(result: OptimizeJobResult) -> list[dict[str, Any]]:
    """A table row per variant of an optimize result: its outcome, and for a failed one the
    reason (the message; `variant_failures` has the whole error)."""
    rows = []
    decoder = is_decoder_run(list(result.variants))
    shown = [m for m in result.task_budget if not (decoder and m in SHOWN_METRICS)]
    for v in result.variants:
        accuracy = v.accuracy
        rows.append(
            {
                "recipe": v.recipe.label,
                "outcome": v.status,
                "chosen": v.recipe.name == result.chosen,
                "within budget": v.within_budget,
                "speedup": v.speedup,
                "speedup CI": (
                    f"{1 / v.ratio_high:.2f}–{1 / v.ratio_low:.2f}x"
                    if v.ratio_low and v.ratio_high
                    else ""
                ),
                "verdict": v.verdict or "",
                **{name: (accuracy.metric(name) if accuracy else None) for name in shown},
                "budget": v.budget_note,
                "samples": samples_of(v),
                "random calibration": v.calibrated_on_random,
                "backend": v.backend,
                "precision": v.precision,
                **(decoder_figures(v) if decoder else _output_figures(v)),
                "model id": v.model_id,
                "error": v.error.message if v.error else "",
            }
        )
    return rows


def _output_figures(variant: VariantResult) -> dict[str, Any]:
    """The figures of a model timed by a forward pass and judged by its outputs."""
    accuracy = variant.accuracy
    return {
        "mean cosine": accuracy.mean_cosine if accuracy else None,
        "top-1 agreement": accuracy.top1_agreement if accuracy else None,
        "top-1 drop": accuracy.top1_drop if accuracy else None,
        "variant p50 (ms)": variant.variant_p50_ms,
    }


def variants_table(
    variants: list[dict[str, Any]], task: str | None = None, metrics: Iterable[str] = ()
) -> pd.DataFrame:
    """The variant rows as the page shows them: '—' where a variant has no figure (a failed
    one), numbers with their unit, the task's `metrics` by their label, and top-1 only for a
    task read by top-1 (a detector's table has its box metrics instead)."""
    rows = [
        {
            **{name: None if value == "" else value for name, value in row.items()},
            "within budget": _yes_no(row.get("within budget")),
            "random calibration": _yes_no(row.get("random calibration")),
            "model id": f"#{row['model id']}" if row.get("model id") else EMPTY,
        }
        for row in variants
    ]
    first = rows[0] if rows else {}
    shown = [c for c in first if task in TOP1_TASKS or c not in TOP1_COLUMNS]
    named = [m for m in metrics if m in shown and m not in VARIANT_NUMBERS]
    numbers = VARIANT_NUMBERS | DECODER_NUMBERS | dict.fromkeys(named, "{:.4g}")
    headers = {name: label_of(name) for name in named}
    return readable_frame(rows, columns=shown, numbers=numbers, keep=["chosen"], headers=headers)


def _yes_no(value: bool | None) -> str:
    return EMPTY if value is None else ("yes" if value else "no")


def pass_settings_table(info: PassInfo) -> pd.DataFrame:
    """A pass's settings: each one's default as written in a form ('—' for none) and meaning."""
    fields = info.config_class().model_fields
    rows = [
        {
            "setting": name,
            "default": "required"
            if field.is_required()
            else _default(field.get_default(call_default_factory=True)),
            "meaning": field.description or "",
        }
        for name, field in fields.items()
    ]
    return readable_frame(rows, columns=["setting", "default", "meaning"])


def _default(value: Any) -> str:
    """A default as a person reads it: 'minmax', 'conv_relu, gemm_relu', '—' for none."""
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    cell_text = cell(value)
    return cell_text if isinstance(cell_text, str) else str(cell_text)


@dataclass(frozen=True)
class TaskHint:
    """What the form expects of a model before its run: the task its outputs read as (None:
    none recognized), the budget to suggest, whether top-1 fits it, and whether it is a decoder
    with a KV cache (judged on a text by its own run, optistudio.core.optimize.decoder_run)."""

    task: str | None
    label: str
    budget_example: str
    reads_top1: bool
    decoder: bool = False
    confidence: str | None = None
    """Recognition's confidence ('low': cosine and the numeric floor decide, the task's
    metrics are shown beside); None when the task was set or none was recognized."""

    @property
    def placeholder(self) -> str:
        """The budget box's placeholder: the judged task's own example, else why there is none."""
        return self.budget_example or NO_TASK_BUDGET

    def empty_means(self) -> str:
        """What an empty budget box means for this model."""
        if self.task is None:
            return "no task recognized: the cosine and top-1 budget below judges"
        if self.confidence == "low":
            return f"{self.label} read with low confidence: cosine judges, its metrics beside"
        return f"{self.label}'s default, {self.budget_example}"


def task_hint(model_path: Path | None, task: str | None = None) -> TaskHint:
    """The task the model's graph reads as (or `task`, the one set for it) and its budget
    example; a model whose file cannot be read gets the generic hint."""
    if task == NO_TASK:
        return TaskHint(None, "none: cosine and top-1 only", "", True)
    confidence = None
    try:
        if task:
            info = evaluators.get(task)
        else:
            info, confidence = _recognized(model_path)
    except Exception as exc:  # a hint must never break the form: it falls back to the generic
        log.info("no task hint for %s: %s", model_path, exc)
        info = None
    if info is None:
        return TaskHint(None, "not recognized", "", True)
    decoder = model_path is not None and is_decoder_file(model_path)
    budget = info.labels_budget if decoder and info.labels_budget else info.default_budget
    example = ", ".join(f"{name}={limit:g}" for name, limit in budget.items())
    top1 = info.name in TOP1_TASKS
    return TaskHint(info.name, info.label, example, top1, decoder, confidence)


def _recognized(model_path: Path | None) -> tuple[EvaluatorInfo | None, str | None]:
    """The task the model's graph reads as and recognition's confidence in it."""
    if model_path is None:
        return None, None
    found = read_task(model_facts(model_path)).found
    return (found[0], found[1].confidence) if found else (None, None)


def not_your_data(result: OptimizeJobResult) -> str:
    """The page's warning for a run judged on built-in samples or random inputs; '' on data."""
    decoder = is_decoder_run(list(result.variants))
    if decoder and any(v.builtin_samples for v in result.variants):
        return (
            "Judged on built-in text, not yours: every variant's perplexity is on that text "
            "(the note below says which). Give a .txt or token ids (.npy) as 'Calibration / "
            "accuracy data' to confirm."
        )
    if any(v.builtin_samples for v in result.variants):
        return (
            "Judged on built-in samples, not your data: every variant's accuracy is agreement "
            "with the original on them. Give 'Calibration / accuracy data' to confirm."
        )
    if judged_on_random(result.variants):
        return (
            "Judged on random inputs, not your data: every variant's accuracy is agreement with "
            "the original on noise, and INT8 calibrated on them is left out. Give 'Calibration "
            "/ accuracy data' to confirm."
        )
    return ""


def samples_of(variant: VariantResult) -> str:
    """What the variant was calibrated and judged on, for its row: 'your data' only for the
    user's own samples (`optistudio.core.optimize.provenance.samples_label`)."""
    return samples_label(variant)


def variant_failures(result: OptimizeJobResult) -> list[tuple[str, ErrorInfo]]:
    """(recipe label, error) of each variant that failed, in the run's order (one not
    applicable is no failure: `not_applicable`)."""
    return [
        (v.recipe.label, v.error)
        for v in result.variants
        if v.error is not None and v.status != "not_applicable"
    ]


def not_applicable(result: OptimizeJobResult) -> list[str]:
    """'INT8 dynamic: not applicable to this graph: ...' for each recipe set aside."""
    return [
        f"{v.recipe.label}: {v.why_not_applicable()}"
        for v in result.variants
        if v.status == "not_applicable"
    ]


def _check_output(info: ModelInfo, output: str | None) -> None:
    outputs = [tensor.name for tensor in info.outputs]
    if output and output not in outputs:
        raise DataMismatch(
            f"The model has no output {output!r}. Its outputs: {', '.join(outputs)}."
        )


def _given(**values: float | None) -> dict[str, float]:
    """The values the form sets; the others keep the spec's defaults."""
    return {name: value for name, value in values.items() if value is not None}


def _is_zip(upload: BinaryIO) -> bool:
    """Uploads (Streamlit's UploadedFile is a BytesIO) carry the user's file name."""
    return str(upload.name).lower().endswith(".zip")
