"""The optimize job: make variants of the job's model, store each as a model with its recipe.

A recipe that failed is a failed variant with its error, and so is a made variant that could not
be stored (over the upload limit, the artifact store refused it); the job succeeds with the
others, and its message says how many failed. An OpenVINO IR (NNCF's INT8 on the OpenVINO
model) is stored as a variant with backend openvino (services.backend_variants); a LiteRT file,
and a decoder's IR (its tokenizer and configs are not stored with it), stay in the job's
folder, timed and judged like the others. Data files (calibration, labels, the qat
recipe's training data) are read from this worker's copies of the stored files.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from optistudio.core.errors import ErrorInfo, OptistudioError
from optistudio.core.llm.folder import is_decoder_file
from optistudio.core.model.info import ModelInfo
from optistudio.core.optimize.headline import unmade_counts
from optistudio.core.optimize.run import (
    OptimizeReport,
    OptimizeSpec,
    VariantResult,
    choose,
    optimize,
    told,
)
from optistudio.core.passes.qat import QAT_RECIPE
from optistudio.db.models import Job, Model
from optistudio.services.artifact_store import local_data_file
from optistudio.services.backend_variants import add_backend_variant, recorded_backend
from optistudio.services.catalog import add_model_file
from optistudio.services.jobkinds import OptimizeJobSpec
from optistudio.services.jobresults import OptimizeJobResult, StoredVariant
from optistudio.services.settings import get_settings
from optistudio.workers.artifacts import model_of
from optistudio.workers.jobs import JobContext
from optistudio.workers.outcome import Done

log = logging.getLogger(__name__)

TRAINING_FILES = ("train_path", "train_labels_path")


def optimize_job(job: Job, spec: OptimizeJobSpec, context: JobContext) -> Done[OptimizeJobResult]:
    """Make the job's recipes into variants, check their accuracy and time them."""
    settings = get_settings()
    model_path, info = model_of(job)
    text = None
    if is_decoder_file(model_path):  # judged on a text (.txt or token ids .npy), not arrays
        data, labels = None, None
        text = local_data_file(spec.data_path) if spec.data_path else None
    else:
        data, labels = spec.open_data(info.inputs)
    out_dir = settings.artifact_dir / "jobs" / str(job.id)
    shutil.rmtree(out_dir, ignore_errors=True)  # a redelivered job starts clean
    report = optimize(
        model_path,
        local_training(spec.optimize_spec()),
        out_dir=out_dir,
        data=data,
        labels_file=labels,
        progress=context.progress,
        text=text,
    )
    made_from = Made(info, threads=report.spec.comparison.threads, decoder=text is not None)
    variants = [_stored(job, variant, context, made_from) for variant in report.variants]
    best = choose(variants, speed_only=spec.speed_only)  # the chosen one may not be stored
    chosen = best.recipe.name if best else None
    said = told(variants, chosen, report.spec)  # the headline of the choice among those stored
    result = OptimizeJobResult.model_validate(
        report.model_dump() | {"variants": variants, "chosen": chosen} | said
    )
    return Done(summary(result), result, environment=report.environment)


def local_training(spec: OptimizeSpec) -> OptimizeSpec:
    """The spec with the qat pass's training files at this worker's copies (the job records
    where the studio stored them, as it does the calibration data's)."""
    qat = spec.pass_settings.get(QAT_RECIPE, {})
    local = {key: str(local_data_file(qat[key])) for key in TRAINING_FILES if qat.get(key)}
    if not local:
        return spec
    settings = spec.pass_settings | {QAT_RECIPE: qat | local}
    return spec.model_copy(update={"pass_settings": settings})


@dataclass(frozen=True)
class Made:
    """What every variant of the run shares: the card of the model it was made from (an IR is
    fed as that model is), the threads it was timed at, and whether that model is a decoder."""

    info: ModelInfo
    threads: int | None = None
    decoder: bool = False


def _stored(job: Job, variant: VariantResult, context: JobContext, made: Made) -> StoredVariant:
    """The variant with its stored model's id, or failed with the reason it was not stored."""
    stored = StoredVariant.model_validate(variant.model_dump())
    try:
        stored.model_id = _store_variant(job, variant, context, made)
    except OptistudioError as exc:
        log.info("job %s: variant %s not stored: %s", job.id, variant.recipe.name, exc)
        stored.fail(
            ErrorInfo(code=exc.code, message=f"Made, but not stored: {exc.message}", hint=exc.hint)
        )
    return stored


def _store_variant(job: Job, variant: VariantResult, context: JobContext, made: Made) -> int | None:
    if variant.status != "made" or variant.path is None or job.model is None:
        return None
    suffix = Path(variant.path).suffix
    if suffix == ".tflite" or (suffix == ".xml" and made.decoder):  # a LiteRT file, or a
        # decoder's NNCF INT4 IR (its tokenizer and configs are not stored with it), stays in
        # the job's folder, timed and judged like the others; export bundles carry LiteRT files
        return None
    if backend := recorded_backend(variant.backend):  # its own model, whatever file it runs
        return _store_backend_variant(job.model, variant, context, backend, made)
    entry = add_model_file(
        context.factory,
        get_settings(),
        Path(variant.path),
        name=f"{job.model.name} · {variant.recipe.name}",
        origin="variant",
        parent_id=job.model.id,
        recipe=variant.recipe.model_dump(mode="json"),
        precision=variant.precision,
    )
    return entry.model_id


def _store_backend_variant(
    original: Model, variant: VariantResult, context: JobContext, backend: str, made: Made
) -> int:
    """A variant made for a backend other than ONNX Runtime (BF16 on OpenVINO, NNCF's INT8
    there, an OpenVINO IR): a model of its own with its backend, precision and threads, even
    where its file is the original's or another variant's."""
    recipe = variant.recipe
    shown = recipe.name if "@" in recipe.name else f"{recipe.name}@{backend}"
    entry = add_backend_variant(
        context.factory,
        get_settings(),
        Path(variant.path or ""),
        name=f"{original.name} · {shown}",
        parent_id=original.id,
        recipe=recipe.model_dump(mode="json"),
        backend=backend,
        precision=variant.precision,
        threads=made.threads,
        like=made.info,
    )
    return entry.model_id


def summary(report: OptimizeReport) -> str:
    """One line for the job: how many variants were made, failed and were not applicable to
    this model, then the headline (the chosen one, or keep the original, and the fastest left
    out with why)."""
    made, failed, aside = report.made, len(report.failed), len(report.not_applicable)
    if not made:
        return f"No variant could be made: {unmade_counts(report.variants)}; see each one's reason."
    text = f"Made {len(made)} variant(s)" + (f", {failed} failed" if failed else "")
    text += (f", {aside} not applicable" if aside else "") + "."
    return f"{text} {report.said()}"
