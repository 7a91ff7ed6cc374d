"""The optimization run of a decoder with a KV cache: weight-only variants judged on a text and
timed as decoders, Auto choosing the fastest within the perplexity budget.

A decoder's speed is its decoding, not one forward pass, and its accuracy is how it predicts
text, not a cosine on logits fed random ids; so optistudio.core.optimize.run hands a decoder
(a folder or an .onnx with past_key_values inputs, optistudio.core.llm.decoder) to this run:

- candidates: Auto's are weight-only (optistudio.core.optimize.recipes.decoder_candidates:
  MatMulNBits INT4 and INT8 on ONNX Runtime, NNCF's INT4 on OpenVINO where NNCF is installed);
  a named recipe runs as for any model, and one that needs calibration inputs fails with why;
- judged: every variant and the FP32 original on the same windows of one text (the user's, or
  built-in text, optistudio.core.optimize.decoder_text), fed with consistent past and total
  lengths, by the text_generation evaluator: perplexity and its increase over the original's,
  next-token top-1 agreement and mean KL, the cosine and errors of the logits beside them. The
  default budget is the evaluator's with a text: perplexity increase <= 5 %;
- timed: interleaved greedy decoding against the FP32 original (optistudio.core.optimize.
  decoder_timing): TTFT, tokens/s at batch 1, each with its interval, the size on disk beside
  the original's;
- chosen: optistudio.core.llm.choice.fastest_within_budget by decode speed at batch 1 (TTFT or
  throughput at batch N on request, `DecoderSettings.rank_by`), each variant ranked by its
  figure against the same anchor (the original's median figure x the variant's paired ratio),
  which orders variants as their ratios do, so `run.choose` on the stored variants agrees.

Failures are a variant's, as in the ordinary run: recorded with the reason, the others go on.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from optistudio.core.backends.base import SessionOptions
from optistudio.core.errors import (
    BackendUnavailable,
    Cancelled,
    DataMismatch,
    InvalidSpec,
    OptistudioError,
    TimedOut,
)
from optistudio.core.llm.card import DecoderCard, read_card, size_on_disk
from optistudio.core.llm.choice import (
    RANK_LABELS,
    DecoderCandidate,
    RankBy,
    fastest_within_budget,
)
from optistudio.core.llm.decode import DecoderSession, open_decoder
from optistudio.core.llm.folder import decoder_path
from optistudio.core.llm.weight_only import copy_configs
from optistudio.core.machine.environment import fingerprint
from optistudio.core.measure.compare import FASTER
from optistudio.core.model.intake import inspect_model
from optistudio.core.numerics.accuracy import TaskBudget, TaskJudge, accuracy_report, within_budget
from optistudio.core.numerics.evaluators.base import Recognition, evaluators
from optistudio.core.numerics.evaluators.recognize import model_facts
from optistudio.core.optimize.decoder_text import DecoderWindows, judged_text
from optistudio.core.optimize.decoder_timing import time_against_original
from optistudio.core.optimize.headline import OVER_BUDGET
from optistudio.core.optimize.making import (
    NO_SIZE_LIMIT,
    check_variant,
    run_precision,
    run_recipe,
)
from optistudio.core.optimize.provenance import budget_suffix, mark, plain_note
from optistudio.core.optimize.recipes import (
    ANY,
    AUTO,
    DECODER_OPENVINO,
    REFERENCE_BACKEND,
    Recipe,
    available_backends,
    resolve_recipes,
    with_settings,
)
from optistudio.core.optimize.spec import DecoderSettings, OptimizeSpec
from optistudio.core.optimize.variant import VariantResult
from optistudio.core.passes.base import PassContext
from optistudio.core.passes.prepare import GraphNotApplicable
from optistudio.core.progress import ProgressCallback, ignore_progress, scaled

log = logging.getLogger(__name__)

TASK = "text_generation"
ORIGINAL = "original"
"""The FP32 original among Auto's candidates (never a recipe name)."""
DECODER_DATA = (
    "A decoder is judged on a text, not on input arrays: give a .txt (tokenized by the "
    "tokenizer.json beside the model) or token ids as .npy."
)
GIVE_TEXT = (
    "give your own: --calib text.txt (tokenized by the tokenizer.json beside the model) or "
    "token ids as .npy on the command line, or 'Calibration / accuracy data' on the Optimize page"
)


@dataclass(frozen=True)
class DecoderRun:
    """What the decoder run found: the fields of the OptimizeReport run.py makes of it."""

    data: str
    variants: list[VariantResult]
    chosen: str | None
    notes: list[str]
    task: str
    task_reason: str
    task_budget: dict[str, float]
    environment: dict[str, Any]

    def report_fields(self) -> dict[str, Any]:
        return {entry.name: getattr(self, entry.name) for entry in fields(self)}


@dataclass(frozen=True)
class _Judged:
    """What every variant is judged and timed on."""

    text: DecoderWindows
    judge: TaskJudge
    budget: TaskBudget
    settings: DecoderSettings


def refuse_input_data(given: bool) -> None:
    """DataMismatch when input arrays, labels or calibration data were given for a decoder."""
    if given:
        raise DataMismatch(DECODER_DATA, hint="Leave the data out to judge on built-in text.")


def optimize_decoder(
    model: Path,
    spec: OptimizeSpec,
    *,
    out_dir: Path,
    text: Path | None = None,
    progress: ProgressCallback | None = None,
) -> DecoderRun:
    """Make, judge and time one variant per recipe of the decoder `model`; see the module
    docstring. `text`: a .txt or token ids (.npy); None: built-in text."""
    report = progress or ignore_progress
    path = decoder_path(model)
    card = read_card(path)
    judged = _judged(path, card, spec, text)
    recipes, skipped = decoder_recipes(path, spec)
    variants: list[VariantResult] = []
    original = _open(path, _baseline(spec), spec, io_of=card)
    try:
        for index, recipe in enumerate(recipes):
            share = scaled(report, index / len(recipes), (index + 1) / len(recipes))
            variants.append(_variant(path, card, recipe, spec, judged, original, out_dir, share))
    finally:
        original.close()
    chosen, choice_note = choose_decoder(variants, judged.budget, judged.settings.rank_by)
    report(1.0, "Done")
    return DecoderRun(
        data=judged.text.description,
        variants=variants,
        chosen=chosen,
        notes=_notes(judged, variants, skipped, choice_note, spec.decoder),
        task=TASK,
        task_reason=judged.judge.recognition.reason,
        task_budget=judged.budget.limits,
        environment=fingerprint(threads=spec.comparison.threads),
    )


def decoder_recipes(path: Path, spec: OptimizeSpec) -> tuple[list[Recipe], list[str]]:
    """The run's recipes for the decoder, and why Auto's OpenVINO candidate is missing (when
    it is)."""
    usable = available_backends(spec.comparison.device)
    if spec.target_backend != ANY and spec.target_backend not in usable:
        raise BackendUnavailable(
            f"{spec.target_backend} cannot run here. Available: {', '.join(usable)}.",
            hint="Pick one of those targets, or 'any'.",
        )
    info = inspect_model(path, max_bytes=NO_SIZE_LIMIT)
    found = resolve_recipes(
        spec.recipes,
        info,
        target_backend=spec.target_backend,
        backends=usable,
        device=spec.comparison.device,
        decoder=True,
    )
    names = {recipe.name.split("@")[0] for recipe in found}
    skipped = [
        f"{name} (INT4 with NNCF for OpenVINO) is not among the candidates: it needs OpenVINO "
        "and NNCF, which are not both installed here"
        for name in DECODER_OPENVINO
        if AUTO in spec.recipes and spec.target_backend in (ANY, "openvino") and name not in names
    ]
    return [with_settings(recipe, spec.pass_settings) for recipe in found], skipped


def choose_decoder(
    variants: list[VariantResult], budget: TaskBudget, rank_by: RankBy
) -> tuple[str | None, str]:
    """Auto's pick among the made variants (None: keep the original) and the note saying why
    each was or was not chosen (module docstring)."""
    made = [v for v in variants if v.status == "made" and v.decoding and v.accuracy]
    if not made:
        return None, ""
    anchor = _anchor_figures(made)
    candidates = [DecoderCandidate(name=ORIGINAL, perplexity_increase=0.0, **anchor)]
    candidates += [_candidate(v, anchor) for v in made]
    limit = budget.limits.get("perplexity_increase", math.inf)
    choice = fastest_within_budget(candidates, ORIGINAL, budget=limit, rank_by=rank_by)
    reasons = "; ".join(f"{name}: {why}" for name, why in choice.reasons.items())
    note = (
        f"Auto for decoders, by {RANK_LABELS[rank_by]} within the budget (each figure against "
        f"the same FP32 anchor: its median x the variant's paired ratio): {reasons}."
    )
    return (None if choice.chosen == ORIGINAL else choice.chosen), note


def _judged(path: Path, card: DecoderCard, spec: OptimizeSpec, text: Path | None) -> _Judged:
    if spec.task not in (None, TASK):
        raise InvalidSpec(
            f"A decoder with a KV cache is judged in {TASK} (perplexity on a text), not "
            f"{spec.task!r}.",
            hint=f"Leave the task out, or set it to {TASK}.",
        )
    info = evaluators.get(TASK)
    evaluator = info.create()
    recognition = evaluator.recognize(model_facts(path)) or Recognition(
        task=TASK, reason=f"a decoder with {card.layers} cached layers", outputs=[card.io.logits]
    )
    settings = fitted(spec.decoder, card)
    windows = judged_text(path, card, text, window=settings.window, max_tokens=settings.max_tokens)
    limits = dict(spec.budgets) or dict(info.labels_budget)
    budget = TaskBudget(info, limits, defaulted=not spec.budgets).check()
    judge = TaskJudge(evaluator, recognition, labels=windows.texts)
    return _Judged(text=windows, judge=judge, budget=budget, settings=settings)


def fitted(settings: DecoderSettings, card: DecoderCard) -> DecoderSettings:
    """The settings with the prompt, the steps and the window within the model's context."""
    context = card.context_length
    if context is None:
        return settings
    steps = min(settings.decode_steps, max(1, context // 2))
    prompt = min(settings.prompt_tokens, max(1, context - steps - 1))
    window = min(settings.window, context)
    return settings.model_copy(
        update={"decode_steps": steps, "prompt_tokens": prompt, "window": window}
    )


def _variant(
    path: Path,
    card: DecoderCard,
    recipe: Recipe,
    spec: OptimizeSpec,
    judged: _Judged,
    original: DecoderSession,
    out_dir: Path,
    share: ProgressCallback,
) -> VariantResult:
    backend = recipe.backend or _baseline(spec)
    result = VariantResult(recipe=recipe, precision=recipe.precision or "fp32", backend=backend)
    mark(result, judged.text, judged.text, calibrates=False)
    folder = out_dir / recipe.name
    context = PassContext(work_dir=folder, target_backend=backend, progress=scaled(share, 0, 0.3))
    try:
        file, result.steps, produced = run_recipe(path, recipe, folder, context)
        copy_configs(path.parent, folder)
        result.precision = run_precision(produced, recipe.precision)
        if file.suffix == ".onnx":
            check_variant(file, recipe)
        result.path = str(file)
        share(0.3, f"{recipe.label}: judging on the text")
        _judge(result, path, file, judged, spec)
        share(0.6, f"{recipe.label}: decoding on {backend} against the original")
        _time(result, card, (file, path), spec, judged.settings, original)
    except (Cancelled, TimedOut):
        raise
    except GraphNotApplicable as exc:  # e.g. NNCF on a graph of undetermined element types
        log.info("recipe %s not applicable to the decoder: %s", recipe.name, exc)
        result.set_aside(exc.info())
    except OptistudioError as exc:
        log.info("recipe %s failed on the decoder: %s", recipe.name, exc)
        result.fail(exc.info())
    return result


def _judge(
    result: VariantResult, path: Path, file: Path, judged: _Judged, spec: OptimizeSpec
) -> None:
    result.accuracy = accuracy_report(
        path,
        file,
        judged.text,
        judge=judged.judge,
        candidate_backend=result.backend,
        candidate_precision=result.recipe.precision or "fp32",
    )
    result.within_budget, result.budget_note = within_budget(
        result.accuracy, spec.budget, judged.budget
    )
    result.budget_note += budget_suffix(result, speed_only=spec.speed_only)


def _time(
    result: VariantResult,
    card: DecoderCard,
    files: tuple[Path, Path],
    spec: OptimizeSpec,
    settings: DecoderSettings,
    original: DecoderSession,
) -> None:
    """Time the variant (files: its own and the original's) against the open original."""
    file = files[0]
    variant = _open(file, result.backend, spec, io_of=card if file.suffix != ".onnx" else None)
    try:
        sizes = (size_on_disk(file), size_on_disk(files[1]))
        figures = time_against_original(
            original, variant, card.vocab or 2, settings, spec.comparison, sizes=sizes
        )
    finally:
        variant.close()
    ranked = figures.ranked()
    result.decoding = figures
    result.ratio, result.ratio_low, result.ratio_high = ranked.ratio, ranked.low, ranked.high
    result.verdict = ranked.verdict
    result.speedup = 1.0 / ranked.ratio
    result.original_p50_ms, result.variant_p50_ms = figures.ranked_ms()


def _open(
    path: Path, backend: str, spec: OptimizeSpec, *, io_of: DecoderCard | None
) -> DecoderSession:
    """The decoder at `path` on `backend`, not spinning between runs (two sessions share the
    process); `io_of`: the card whose interface an IR (.xml) keeps."""
    options = SessionOptions(
        threads=spec.comparison.threads, device=spec.comparison.device, spin_wait=False
    )
    return open_decoder(path, backend=backend, options=options, io=io_of.io if io_of else None)


def _baseline(spec: OptimizeSpec) -> str:
    return REFERENCE_BACKEND if spec.target_backend == ANY else spec.target_backend


def _anchor_figures(made: list[VariantResult]) -> dict[str, float | None]:
    """The original's median figures over every variant's pairs."""
    figures = [v.decoding for v in made if v.decoding is not None]
    throughput = [f.original_throughput_tokens_per_s for f in figures]
    known = [t for t in throughput if t is not None]
    return {
        "tokens_per_s": float(np.median([f.original_tokens_per_s for f in figures])),
        "ttft_ms": float(np.median([f.original_ttft_ms for f in figures])),
        "throughput": float(np.median(known)) if known else None,
    }


def _candidate(variant: VariantResult, anchor: dict[str, float | None]) -> DecoderCandidate:
    figures, accuracy = variant.decoding, variant.accuracy
    assert figures is not None and accuracy is not None
    increase = accuracy.task_metrics.get("perplexity_increase", math.inf)
    throughput = anchor["throughput"]
    return DecoderCandidate(
        name=variant.recipe.name,
        tokens_per_s=float(anchor["tokens_per_s"] or 0.0) / figures.decode.ratio,
        ttft_ms=float(anchor["ttft_ms"] or 0.0) * figures.ttft.ratio,
        throughput=throughput / figures.throughput.ratio
        if throughput is not None and figures.throughput is not None
        else None,
        perplexity_increase=increase,
        faster=variant.verdict == FASTER,
        missed="" if variant.within_budget else plain_note(variant).removeprefix(OVER_BUDGET),
    )


def _notes(
    judged: _Judged,
    variants: list[VariantResult],
    skipped: list[str],
    choice_note: str,
    asked: DecoderSettings,
) -> list[str]:
    notes = [choice_note] if choice_note else []
    if judged.text.builtin and any(v.status == "made" for v in variants):
        notes.append(
            f"Built-in text, not your data: every variant was judged on {judged.text.source}. "
            f"It stands in for your text; {GIVE_TEXT}."
        )
    fit = judged.settings
    if (fit.prompt_tokens, fit.decode_steps, fit.window) != (
        asked.prompt_tokens,
        asked.decode_steps,
        asked.window,
    ):
        notes.append(
            f"Timed with {fit.prompt_tokens}-token prompts and {fit.decode_steps} steps, judged "
            f"in windows of {fit.window}, to fit the model's context."
        )
    return notes + [f"{line}." for line in skipped]
