"""The optimization run: apply each recipe to the original, then check and time every variant.

For each recipe the passes run in order, each on the previous pass's output. The variant is then
checked against the original on the accuracy data and timed against it with an interleaved
comparison (optistudio.core.measure.compare), so its speedup carries a confidence interval. The
data is the user's; without it, built-in samples (real photographs, text lines, sentences, audio
or bytes made on the fly, optistudio.core.optimize.no_data), else random inputs; both measure
agreement with the original, not task accuracy, and what a variant was calibrated and judged
on decides whether Auto may choose it (optistudio.core.optimize.provenance).

A recipe that fails with an expected error (a pass that cannot handle the model, a variant file
the checks refuse, data the variant cannot run) is one variant with status "failed", its error
(code, message, hint) and no file; the others go on. One whose passes do not apply to this
graph (ONNX Runtime's quantizer refuses it, or makes a graph ONNX Runtime cannot load:
optistudio.core.passes.prepare), or whose checked file its backend cannot load (OpenVINO, after
trying it at the run's static shapes), is "not_applicable" with that sentence instead: listed
apart, never counted as a failure. Bugs still raise, and so does a cancelled or
timed-out run. A variant file is checked as intake checks an upload, but a refusal is the
recipe's fault, never the model's: it is reported as the pass's failure.

A recipe with an inference precision (bf16@openvino, int8_nncf_bf16) is checked and timed at it
on its backend, the original staying FP32; the variant's precision says so ('bf16', 'int8+bf16').
One that differs from an earlier recipe only in that precision times the earlier one's file.

A candidate Auto could choose whose first interval straddles the threshold "faster" must clear
is timed again in more interleaved rounds until it resolves or a cap passes (on one thread when
the machine is busy; the spec's unsteady_timing, optistudio.core.optimize.unsteady), and its
timing note says which.

The chosen variant is the one with the lowest B/A latency ratio among those within the accuracy
budget whose interval says "faster", leaving out, unless the run is speed-only, those calibrated
on random inputs or on built-in samples with no task to check them; if none qualifies, the
original stays the best choice.
The report's headline says so in one line and names the fastest variant left out and why
(optistudio.core.optimize.headline). Where full static INT8 on ONNX Runtime was measured and
none paid, Auto also makes int8_placed, INT8 only on the nodes where it is faster
(optistudio.core.optimize.placement_offer). Where NNCF's INT8 on the OpenVINO model was faster but
out of budget, Auto also makes int8_nncf_ov_careful, the same INT8 calibrated with care, and
where that misses too int8_nncf_ov_ac, the same INT8 with NNCF's accuracy control against this
run's own judge (optistudio.core.optimize.accuracy_offer; the judge reaches the pass
as PassContext.judge, optistudio.core.optimize.variant_judge). Auto's QAT note counts as misses
only the INT8 variants that were judged and timed; one that failed outright is named with its
error. Where Auto's pick runs on OpenVINO and the model has a dynamic input dim, Auto also makes
the pick's file fixed at the run's input shapes, which OpenVINO compiles into faster code
(optistudio.core.optimize.static_offer, the ov_static pass).

The target is a backend, or 'any' (the default): then the candidates spread over every backend
available on the CPU (see optistudio.core.optimize.recipes.any_backend_candidates), each variant is checked and
timed on its own backend, and every speedup is against the original on ONNX Runtime, so the
choice covers the backend too: "run the NNCF variant on OpenVINO" can win over "quantize for
ONNX Runtime".

A decoder with a KV cache (its folder, or its .onnx) is handed to optistudio.core.optimize.
decoder_run: weight-only variants judged on a text by perplexity and timed as decoders (TTFT,
tokens/s); its report is this one, so what stores and shows a run reads it alike.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.backends import backends
from optistudio.core.backends.blame import made_by_studio
from optistudio.core.data.datasets import load_labels
from optistudio.core.data.inputs import sample_dims
from optistudio.core.data.source import CalibrationSource
from optistudio.core.errors import (
    BackendUnavailable,
    Cancelled,
    DataMismatch,
    InvalidSpec,
    ModelLoadError,
    OptistudioError,
    TimedOut,
)
from optistudio.core.llm.folder import is_decoder_file
from optistudio.core.machine.environment import fingerprint
from optistudio.core.measure.compare import FASTER, ComparisonSpec, compare_models
from optistudio.core.model.info import ModelInfo
from optistudio.core.model.intake import inspect_model
from optistudio.core.numerics.accuracy import (
    TaskBudget,
    TaskJudge,
    accuracy_report,
    within_budget,
)
from optistudio.core.numerics.accuracy_report import constant_notes
from optistudio.core.numerics.evaluators.base import ModelFacts
from optistudio.core.numerics.evaluators.evidence import Confidence
from optistudio.core.numerics.evaluators.recognize import (
    TaskReading,
    as_run,
    model_facts,
    read_task,
)
from optistudio.core.optimize.accuracy_offer import (
    as_offered,
    offer_accuracy_control,
    offer_careful_calibration,
    same_search,
    searched_without_a_file,
)
from optistudio.core.optimize.decoder_run import optimize_decoder, refuse_input_data
from optistudio.core.optimize.headline import LeftOut, headline, left_out, not_applicable_note
from optistudio.core.optimize.making import (
    check_variant,
    made_earlier,
    made_file,
    run_precision,
)
from optistudio.core.optimize.no_data import RunData, without_data
from optistudio.core.optimize.placement_offer import PLACEMENT_RECIPE, offer_int8_placement
from optistudio.core.optimize.provenance import budget_suffix, data_notes, left_for_data, mark
from optistudio.core.optimize.recipes import (
    ANY,
    AUTO,
    REFERENCE_BACKEND,
    Recipe,
    available_backends,
    int8_notes,
    resolve_recipes,
    with_settings,
)
from optistudio.core.optimize.run_shapes import output_shapes
from optistudio.core.optimize.spec import NO_TASK as NO_TASK
from optistudio.core.optimize.spec import QUICK_COMPARISON as QUICK_COMPARISON
from optistudio.core.optimize.spec import OptimizeSpec as OptimizeSpec
from optistudio.core.optimize.static_offer import offer_static_shapes
from optistudio.core.optimize.steady import Steady, steady_note, steady_timing
from optistudio.core.optimize.unsteady import resolve_unsteady, timing_notes
from optistudio.core.optimize.variant import VariantResult
from optistudio.core.optimize.variant_judge import RunJudge
from optistudio.core.passes.base import PassContext, passes
from optistudio.core.passes.prepare import GraphNotApplicable
from optistudio.core.passes.qat import QAT_RECIPE, auto_offer, is_ptq
from optistudio.core.progress import ProgressCallback, ignore_progress, scaled

log = logging.getLogger(__name__)


class OptimizeReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    spec: OptimizeSpec
    data: str = Field(description="Where the calibration and accuracy data came from.")
    variants: list[VariantResult]
    chosen: str | None = Field(description="Recipe name of the best variant, None = original.")
    notes: list[str] = Field(
        default_factory=list,
        description="What the run chose for the user and why, e.g. the INT8 weight range for "
        "this CPU (7-bit on x86 without VNNI/AMX).",
    )
    task: str | None = Field(
        default=None, description="The task the variants were judged in; None: cosine/top-1."
    )
    task_reason: str = Field(
        default="",
        description="Why that task (the outputs read); without one, why none was recognized.",
    )
    task_confidence: Confidence | None = Field(
        default=None,
        description="How strongly recognition's evidence supports the task: high, medium or "
        "low; None when the user set the task, none was recognized, or the run predates it.",
    )
    task_reasons: list[str] = Field(
        default_factory=list,
        description="The evidence recognition weighed, a sentence each with its weight, "
        "heaviest first ('+3 graph: probs [N, 1000] after Softmax on the class axis'); "
        "without a task, why none was recognized and what each task's case lacked.",
    )
    task_budget: dict[str, float] = Field(
        default_factory=dict, description="The limits the variants were judged by, by metric."
    )
    environment: dict[str, Any] = Field(default_factory=dict)
    headline: str = Field(
        default="",
        description="The run in one line: the chosen variant and its speedup (or keep the "
        "original), and the fastest variant left out with why (optistudio.core.optimize."
        "headline); empty on results stored before headlines.",
    )
    left_out: LeftOut | None = Field(
        default=None,
        description="The fastest variant measured faster than the choice that Auto did not "
        "choose, and why; None when the choice is the fastest.",
    )

    def said(self) -> str:
        """The headline; for a result stored before headlines, one made from its variants."""
        return self.headline or str(told(self.variants, self.chosen, self.spec)["headline"])

    @property
    def made(self) -> list[VariantResult]:
        return [v for v in self.variants if v.status == "made"]

    @property
    def failed(self) -> list[VariantResult]:
        return [v for v in self.variants if v.status == "failed"]

    @property
    def not_applicable(self) -> list[VariantResult]:
        """Recipes that do not apply to this graph or whose backend cannot load the variant:
        listed apart from failures (optistudio.core.optimize.variant)."""
        return [v for v in self.variants if v.status == "not_applicable"]


def optimize(
    model: Path,
    spec: OptimizeSpec,
    *,
    out_dir: Path,
    data: CalibrationSource | None = None,
    labels: np.ndarray | None = None,
    progress: ProgressCallback | None = None,
    labels_file: Path | None = None,
    calibration: CalibrationSource | None = None,
    text: Path | None = None,
) -> OptimizeReport:
    """Make one variant per recipe, check and time each; see the module docstring.

    `labels` are class ids (top-1); `labels_file` is read by the task's evaluator (strings for
    a text recognizer, boxes for a detector, class ids for a classifier). `calibration`: inputs
    the INT8 passes calibrate on instead of `data` (on which every variant is still judged), so
    that post-training INT8 is not calibrated on the very samples that judge it.

    A decoder with a KV cache (its folder, or its .onnx) goes to optistudio.core.optimize.
    decoder_run, judged on `text` (a .txt or token ids .npy; None: built-in text)."""
    if is_decoder_file(model):
        refuse_input_data(any(x is not None for x in (data, labels, labels_file, calibration)))
        found = optimize_decoder(model, spec, out_dir=out_dir, text=text, progress=progress)
        return OptimizeReport(
            spec=spec, **found.report_fields(), **told(found.variants, found.chosen, spec)
        )
    report = progress or ignore_progress
    info = inspect_model(model)
    _check_output(info, spec.accuracy_output)
    choice = task_judge(model, spec, data, labels_file)
    fed = run_data(model, info, spec, data, choice.judge)
    judging = Judging(
        fed.judged,
        _class_labels(labels, labels_file, choice.judge, data),
        choice.judge,
        choice.budget,
        calibration or fed.calibration,
    )
    timed = steady_timing(spec.model_copy(update={"comparison": timing_spec(spec, info, data)}))
    recipes = _run_recipes(spec, info)
    making = Making(model, info, timed.spec, out_dir, judging)
    variants = _make_all(making, spec, recipes, report)
    _add_placement(making, spec, recipes, variants, report)
    _add_accuracy_control(making, spec, variants, report)
    qat_note = _add_qat(making, spec, recipes, variants, report)
    _add_static_shapes(making, spec, variants, report)
    resolve_unsteady(model, variants, timed.spec, progress=report)
    report(1.0, "Done")
    return _report(spec, fed, choice, variants, recipes, qat_note, timed)


def _class_labels(
    labels: np.ndarray | None,
    labels_file: Path | None,
    judge: TaskJudge | None,
    data: CalibrationSource | None,
) -> np.ndarray | None:
    """The class ids top-1 is judged against: given, else read from `labels_file` when no task
    judges (cosine and top-1) or the task is classification; None otherwise."""
    if labels is not None or labels_file is None:
        return labels
    if judge is None:
        if data is None:
            raise DataMismatch("Labels were given without the data they label.")
        return load_labels(labels_file, samples=_sample_total(data))
    return judge.labels if judge.recognition.task == "classification" else None


def _run_recipes(spec: OptimizeSpec, info: ModelInfo) -> list[Recipe]:
    """The spec's recipes resolved for its target on the backends this machine has, with
    the run's pass settings (the accuracy-aware pass searches against the run's budget)."""
    settings = {"int8_mixed": {"budget": spec.budget.model_dump()}} | spec.pass_settings
    usable = available_backends(spec.comparison.device)
    if spec.target_backend != ANY and spec.target_backend not in usable:
        why = backends.get(spec.target_backend).create().availability().reason
        raise BackendUnavailable(
            f"{spec.target_backend} cannot run here ({why}). Available: {', '.join(usable)}.",
            hint="Pick one of those targets, or 'any'.",
        )
    resolved = resolve_recipes(
        spec.recipes,
        info,
        target_backend=spec.target_backend,
        backends=usable,
        device=spec.comparison.device,
    )
    return [with_settings(r, settings) for r in resolved]


@dataclass(frozen=True)
class Making:
    """What every variant of a run is made, checked and timed with."""

    model: Path
    info: ModelInfo
    timed: OptimizeSpec
    out_dir: Path
    judging: Judging

    def variant(
        self, recipe: Recipe, share: ProgressCallback, earlier: VariantResult | None = None
    ) -> VariantResult:
        return _variant(
            self.model,
            self.info,
            recipe,
            self.timed,
            self.out_dir,
            self.judging,
            share,
            earlier=earlier,
        )


def _make_all(
    making: Making, spec: OptimizeSpec, recipes: list[Recipe], report: ProgressCallback
) -> list[VariantResult]:
    """One variant per recipe, each with its share of the progress; a recipe that differs
    from an earlier one only in its inference precision times the earlier one's file."""
    slots = len(recipes) + int(_qat_data_given(spec))  # Auto may add QAT at the end
    variants: list[VariantResult] = []
    for index, recipe in enumerate(recipes):
        share = scaled(report, index / slots, (index + 1) / slots, prefix=f"{recipe.label}: ")
        earlier = made_earlier(recipe, _backend_of(recipe, spec), variants)
        variants.append(making.variant(recipe, share, earlier))
    return variants


def _add_placement(
    making: Making,
    spec: OptimizeSpec,
    recipes: list[Recipe],
    variants: list[VariantResult],
    report: ProgressCallback,
) -> None:
    """Auto's INT8-where-it-pays variant appended to `variants` when full static INT8 on ONNX
    Runtime was measured and none paid (optistudio.core.optimize.placement_offer)."""
    if AUTO not in spec.recipes or not offer_int8_placement(variants):
        return
    asked = spec.model_copy(update={"recipes": [PLACEMENT_RECIPE]})
    (placed,) = _run_recipes(asked, making.info)
    share = scaled(report, 1.0, 1.0, prefix=f"{placed.label}: ")
    variants.append(making.variant(placed, share))


def _add_accuracy_control(
    making: Making, spec: OptimizeSpec, variants: list[VariantResult], report: ProgressCallback
) -> None:
    """Auto's carefully calibrated NNCF INT8 on the OpenVINO model, then its accuracy-controlled
    one where that missed too, appended to `variants` when int8_nncf_ov was faster but out of
    budget (optistudio.core.optimize.accuracy_offer)."""
    if AUTO not in spec.recipes:
        return
    for offer in (offer_careful_calibration, offer_accuracy_control):
        for offered in offer(variants):
            asked = spec.model_copy(update={"recipes": [offered.name]})
            (named,) = _run_recipes(asked, making.info)
            recipe = with_settings(as_offered(named, offered), spec.pass_settings)
            backend = _backend_of(recipe, spec)
            searched = searched_without_a_file(recipe, backend, variants)
            if searched is not None:
                variants.append(same_search(recipe, backend, searched))
                continue
            share = scaled(report, 1.0, 1.0, prefix=f"{recipe.label}: ")
            earlier = made_earlier(recipe, backend, variants)
            variants.append(making.variant(recipe, share, earlier))


def _add_static_shapes(
    making: Making, spec: OptimizeSpec, variants: list[VariantResult], report: ProgressCallback
) -> None:
    """Auto's pick fixed at the run's input shapes appended to `variants` when the pick runs on
    OpenVINO and the model has a dynamic input dim (optistudio.core.optimize.static_offer)."""
    if AUTO not in spec.recipes:
        return
    pick = choose(variants, speed_only=spec.speed_only)
    offered = offer_static_shapes(pick, variants, making.info)
    if offered is None or pick is None:
        return
    share = scaled(report, 1.0, 1.0, prefix=f"{offered.label}: ")
    variants.append(making.variant(offered, share, pick))


def _add_qat(
    making: Making,
    spec: OptimizeSpec,
    recipes: list[Recipe],
    variants: list[VariantResult],
    report: ProgressCallback,
) -> str | None:
    """Auto's QAT variant appended to `variants` when every judged post-training INT8 variant
    missed the budget and training data was given; the note that says so or what it needs."""
    add_qat, qat_note = _auto_qat(spec, recipes, variants)
    if add_qat:
        (qat,) = _run_recipes(spec.model_copy(update={"recipes": [QAT_RECIPE]}), making.info)
        share = scaled(report, len(recipes) / (len(recipes) + 1), 1.0, prefix=f"{qat.label}: ")
        variants.append(making.variant(qat, share))
    return qat_note


def _report(
    spec: OptimizeSpec,
    fed: RunData,
    choice: TaskChoice,
    variants: list[VariantResult],
    recipes: list[Recipe],
    qat_note: str | None,
    timed: Steady,
) -> OptimizeReport:
    """The run's report: the choice, its headline, the notes, what judged the variants."""
    chosen = choose(variants, speed_only=spec.speed_only)
    pick = chosen.recipe.name if chosen else None
    samples = {"speed_only": spec.speed_only, "chosen": pick, "why_random": fed.why_random}
    judge = choice.judge
    return OptimizeReport(
        spec=spec,
        data=fed.description,
        variants=variants,
        chosen=pick,
        **told(variants, pick, spec),
        notes=int8_notes(recipes)
        + steady_note(timed.busy)
        + data_notes(variants, **samples)
        + ([qat_note] if qat_note else [])
        + constant_notes(v.accuracy for v in variants)
        + timing_notes(variants)
        + [note for note in [not_applicable_note(variants)] if note],
        environment=fingerprint(threads=timed.spec.comparison.threads),
        task=judge.recognition.task if judge else None,
        task_reason=judge.recognition.reason if judge else next(iter(choice.reasons), ""),
        task_confidence=judge.recognition.confidence if judge else None,
        task_reasons=list(choice.reasons),
        task_budget=choice.budget.limits if choice.budget else {},
    )


def told(
    variants: Sequence[VariantResult], chosen: str | None, spec: OptimizeSpec
) -> dict[str, Any]:
    """The report's headline and left_out fields for the `chosen` recipe among `variants`."""
    rule = {"speed_only": spec.speed_only, "margin": spec.comparison.min_effect}
    return {
        "headline": headline(variants, chosen, **rule),
        "left_out": left_out(variants, chosen, **rule),
    }


def _qat_data_given(spec: OptimizeSpec) -> bool:
    return bool(spec.pass_settings.get(QAT_RECIPE, {}).get("train_path"))


def may_train(spec: OptimizeSpec) -> bool:
    """Whether this run may fine-tune (qat named, or Auto with QAT's training data), so that
    a worker that trains on a GPU suits it best."""
    return QAT_RECIPE in spec.recipes or (AUTO in spec.recipes and _qat_data_given(spec))


def _auto_qat(
    spec: OptimizeSpec, recipes: list[Recipe], variants: list[VariantResult]
) -> tuple[bool, str | None]:
    """Whether Auto adds the qat recipe (every post-training INT8 variant that was measured
    missed the budget), and the note that says so or what it needs, naming those that failed
    outright as failed, never as misses (optistudio.core.passes.qat.auto_offer)."""
    asked = {recipe.name.split("@")[0] for recipe in recipes}
    ptq = [v for v in variants if is_ptq([s.step for s in v.recipe.steps])]
    return auto_offer(
        auto=AUTO in spec.recipes and QAT_RECIPE not in asked,
        ptq_within_budget=[v.within_budget for v in ptq if v.judged],
        training_given=_qat_data_given(spec),
        ptq_failed=[_failure(v) for v in ptq if v.status == "failed"],
    )


def _failure(variant: VariantResult) -> str:
    """'INT8 NNCF: NNCF could not quantize this model.'"""
    return f"{variant.recipe.label}: {variant.error.message if variant.error else 'no reason kept'}"


@dataclass(frozen=True)
class Judging:
    """What every variant of a run is judged on: the data, class labels, the task's judge."""

    source: CalibrationSource
    labels: np.ndarray | None
    judge: TaskJudge | None
    budget: TaskBudget | None
    calibration: CalibrationSource | None = None
    """What the INT8 passes calibrate on when it is not `source`."""


class TaskChoice(NamedTuple):
    """What judges a run's variants: the task's judge and budget ((None, None): cosine and
    top-1), and recognition's reasons (the evidence weighed, or why no task was recognized)."""

    judge: TaskJudge | None
    budget: TaskBudget | None
    reasons: tuple[str, ...] = ()


def task_judge(
    model: Path, spec: OptimizeSpec, data: CalibrationSource | None, labels_file: Path | None
) -> TaskChoice:
    """The task the variants are judged in (the spec's, else recognized from the outputs),
    its labels and its budget (the spec's limits, else the task's default); (None, None) when
    no task applies: cosine and top-1 judge then, and the reasons say why. InvalidSpec for a
    task or a budget metric that does not exist, naming the valid ones."""
    if spec.task == NO_TASK:
        if spec.budgets:
            raise InvalidSpec(
                "A budget in task metrics needs a task; this run has task 'none'.",
                hint="Pick a task, or drop --budget and use the cosine / top-1 budget.",
            )
        return TaskChoice(None, None, ("task 'none' set: judged by output cosine and top-1",))
    facts = model_facts(model)
    outputs = [spec.accuracy_output] if spec.accuracy_output else None
    reading = read_task(facts, spec.task, outputs=outputs)
    if reading.found is None:
        reading = _read_as_run(model, facts, spec, data, outputs) or reading
    if reading.found is None:
        if spec.budgets:
            raise InvalidSpec(
                "No task was recognized in this model's outputs, so a budget in task metrics "
                f"cannot be judged ({reading.why_none}).",
                hint="Set the task (--task, or the Optimize page's task picker), or drop it.",
            )
        return TaskChoice(None, None, tuple(reading.reasons))
    info, recognition = reading.found
    evaluator = info.create()
    task_labels = None
    if labels_file is not None:
        if data is None:
            raise DataMismatch("Labels were given without the data they label.")
        task_labels = evaluator.read_labels(labels_file, samples=_sample_total(data))
    defaults = info.labels_budget if task_labels is not None and info.labels_budget else None
    limits = dict(spec.budgets) or dict(defaults or info.default_budget)
    budget = TaskBudget(info, limits, defaulted=not spec.budgets).check()
    needing = [name for name in spec.budgets if budget.metric(name).needs_labels]
    if needing and task_labels is None:
        agreement = [m.name for m in info.metrics if not m.needs_labels]
        raise InvalidSpec(
            f"The budget's {', '.join(needing)} can only be measured against labels, and none "
            "were given.",
            hint=f"Give labels with the data, or budget what needs none: {', '.join(agreement)}.",
        )
    return TaskChoice(
        TaskJudge(evaluator, recognition, task_labels), budget, tuple(reading.reasons)
    )


def _read_as_run(
    model: Path,
    facts: ModelFacts,
    spec: OptimizeSpec,
    data: CalibrationSource | None,
    outputs: list[str] | None,
) -> TaskReading | None:
    """The task read from the shapes one run returns, where they contradict the declared
    ones (optistudio.core.optimize.run_shapes); None when none does or it finds no task."""
    shapes = output_shapes(model, inspect_model(model), spec.model_inputs, data)
    ran = as_run(facts, shapes)
    reading = read_task(ran, None, outputs=outputs) if ran is not None else None
    return reading if reading is not None and reading.found is not None else None


def _sample_total(data: CalibrationSource) -> int:
    return (
        len(data)
        if isinstance(data, Sized)
        else sum(len(next(iter(batch.values()))) for batch in data.batches())
    )


def run_data(
    model: Path,
    info: ModelInfo,
    spec: OptimizeSpec,
    data: CalibrationSource | None,
    judge: TaskJudge | None,
) -> RunData:
    """The user's data; without it, built-in samples in the spec's shapes, else random inputs
    (optistudio.core.optimize.no_data), the task's judged output probing the normalisation."""
    if data is not None:
        return RunData(data)
    base = spec.dataset(info.inputs, samples=spec.accuracy_samples)
    task = judge.recognition.task if judge else None
    output = judge.recognition.outputs[0] if judge else spec.accuracy_output
    return without_data(model, base, task, output)


def timing_spec(
    spec: OptimizeSpec, info: ModelInfo, data: CalibrationSource | None
) -> ComparisonSpec:
    """How the variants are timed, on the inputs the user gave: the comparison's own, else the
    spec's shapes, dims, values and arrays, else the data's sample shapes (text lines of 48x320
    are timed at 48x320, not at the default size of a dynamic dim)."""
    own = spec.comparison
    if own.given():
        return own
    given = spec.model_inputs
    if not given.given() and data is not None:
        sampled = sample_dims(info.inputs, next(iter(data.batches()), {}))
        given = given.model_copy(update={"dims": sampled})
    return own.model_copy(update=given.model_dump())


def _check_output(info: ModelInfo, output: str | None) -> None:
    names = [tensor.name for tensor in info.outputs]
    if output is not None and output not in names:
        raise DataMismatch(f"The model has no output {output!r}. Its outputs: {', '.join(names)}.")


def choose(variants: Sequence[VariantResult], *, speed_only: bool = False) -> VariantResult | None:
    """The fastest made variant within budget whose speedup is significant, else None. A
    variant calibrated on random inputs, or on built-in samples with no task to check it, is
    left out unless the run is `speed_only` (optistudio.core.optimize.provenance)."""
    good = [
        v
        for v in variants
        if v.status == "made"
        and v.within_budget
        and v.verdict == FASTER
        and v.ratio
        and not left_for_data(v, speed_only=speed_only)
    ]
    return min(good, key=lambda v: (v.ratio, v.ratio_high), default=None)


def _backend_of(recipe: Recipe, spec: OptimizeSpec) -> str:
    """Where the recipe's variant is checked and timed: its own backend, else the target's."""
    return recipe.backend or (
        REFERENCE_BACKEND if spec.target_backend == ANY else spec.target_backend
    )


def _variant(
    model: Path,
    info: ModelInfo,
    recipe: Recipe,
    spec: OptimizeSpec,
    out_dir: Path,
    judged: Judging,
    share: ProgressCallback,
    *,
    earlier: VariantResult | None = None,
) -> VariantResult:
    backend = _backend_of(recipe, spec)
    source = judged.source
    calibration = judged.calibration or source
    result = VariantResult(recipe=recipe, precision=recipe.precision or "fp32", backend=backend)
    calibrates = any(passes.get(step.step).needs_calibration for step in recipe.steps)
    mark(result, source, calibration, calibrates=calibrates)
    context = PassContext(
        work_dir=out_dir / recipe.name,
        target_backend=backend,
        calibration=calibration,
        progress=scaled(share, 0.0, 0.5),
        judge=_run_judge(model, info, recipe, spec, judged),
    )
    try:
        path, result.steps, produced = made_file(model, recipe, out_dir, context, earlier)
        result.precision = run_precision(produced, recipe.precision)
        check_variant(path, recipe)
        result.path = str(path)
        share(0.5, "checking accuracy")
        result.accuracy = accuracy_report(
            model,
            path,
            source,
            labels=judged.labels,
            output=spec.accuracy_output,
            candidate_backend=backend,
            judge=judged.judge,
            candidate_precision=recipe.precision or "fp32",
        )
        result.within_budget, result.budget_note = within_budget(
            result.accuracy, spec.budget, judged.budget, precision=judged_at(result, info)
        )
        result.budget_note += budget_suffix(result, speed_only=spec.speed_only)
        share(0.7, f"timing on {backend} against the original")
        baseline = REFERENCE_BACKEND if spec.target_backend == ANY else spec.target_backend
        timing = spec.comparison.model_copy(
            update={
                "backend": baseline,
                "candidate_backend": backend,
                "candidate_precision": recipe.precision,
            }
        )
        _timed(result, model, path, timing, scaled(share, 0.7, 1.0))
    except (Cancelled, TimedOut):
        raise
    except OptistudioError as exc:
        set_outcome(result, exc)
    return result


def _run_judge(
    model: Path, info: ModelInfo, recipe: Recipe, spec: OptimizeSpec, judged: Judging
) -> RunJudge:
    """The run's judge for a pass that searches against it, at the precision an INT8 variant
    of this recipe is held to (optistudio.core.optimize.variant_judge); it runs nothing until
    a pass asks it."""
    precision = run_precision("int8", recipe.precision)
    return RunJudge(
        model,
        judged.source,
        spec.budget,
        f"int8+{precision}" if info.quantized else precision,
        task_budget=judged.budget,
        judge=judged.judge,
        labels=judged.labels,
        output=spec.accuracy_output,
    )


def set_outcome(result: VariantResult, exc: OptistudioError) -> None:
    """A recipe whose passes do not apply to this graph (GraphNotApplicable), or whose made
    file its backend cannot load (ModelLoadError once the file passed the checks), is not
    applicable, with the sentence that says so; any other expected error fails it."""
    made = result.path is not None
    if made:  # the studio's file, not the user's: the error names the pass (core.backends.blame)
        steps = [step.step for step in result.recipe.steps] or [result.recipe.name]
        exc = made_by_studio(exc, precision=result.precision, passes=steps, backend=result.backend)
    if isinstance(exc, GraphNotApplicable) or (made and isinstance(exc, ModelLoadError)):
        log.info("recipe %s not applicable: %s", result.recipe.name, exc)
        result.set_aside(exc.info())
        return
    log.info("recipe %s failed: %s", result.recipe.name, exc)
    result.fail(exc.info())


def _timed(
    result: VariantResult,
    model: Path,
    variant: Path,
    spec: ComparisonSpec,
    progress: ProgressCallback,
) -> None:
    # A .tflite or OpenVINO IR variant is fed what the original is (its inputs keep their names).
    info_b = inspect_model(model) if variant.suffix in (".tflite", ".xml") else None
    comparison = compare_models(model, variant, spec, info_b=info_b, progress=progress)
    result.ratio, result.ratio_low, result.ratio_high = (
        comparison.ratio,
        comparison.low,
        comparison.high,
    )
    result.verdict = comparison.verdict
    result.speedup = 1.0 / comparison.ratio if comparison.ratio else None
    result.original_p50_ms, result.variant_p50_ms = comparison.a_p50_ms, comparison.b_p50_ms


def judged_at(result: VariantResult, info: ModelInfo) -> str:
    """The precision whose tolerance rule judges the variant: its own, or for a graph that was
    already quantized (QDQ / QLinear) the INT8 rule too, since both runs compute in INT8 there
    (an already-INT8 encoder's fp32@openvino was held to the FP32 rule's 45 dB)."""
    return f"int8+{result.precision}" if info.quantized else result.precision
