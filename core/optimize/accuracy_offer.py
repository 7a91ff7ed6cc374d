"""Whether Auto adds int8_nncf_ov_careful, then int8_nncf_ov_ac (NNCF's INT8 on the OpenVINO
model calibrated with care, then accuracy-controlled).

NNCF's default INT8 on the OpenVINO model (int8_nncf_ov) can be the fastest variant and still
fail the run's judge on real samples (a regression's scores moved by a third, a classifier's
top-1 flipped on photographs) while keeping cosine >= 0.99 on random inputs. Auto then first
tries the same quantization calibrated with care (`offer_careful_calibration`: asymmetric
activations, exact bias correction, activation ranges that clip no calibration sample; every
layer still INT8, so as fast where it keeps the task), and judges and times it as every variant.
Where that too misses, it tries NNCF's accuracy control against its own judge
(optistudio.core.passes.nncf_accuracy), which reverts the layers that break the task to float.
Measured (docs/BENCHMARKS.md, issue 41, 2026-12-06): on PP-OCR's text-direction classifier
(PP-LCNet, hard-swish) NNCF's defaults flipped top-1 on 7 % of built-in photograph crops, the
careful calibration on 3 % (budget 5 %) at the same speed; the mean of per-sample ranges NNCF
takes by default clipped what single samples reached.

Where the graph computes a spectrum and takes its log (a speech-quality regressor's STFT, an
audio-to-MIDI net's constant-Q transform), both offers keep the ops that feed the Log in float
(`front_end`): the magnitudes span decades that INT8's 256 steps cannot hold before the log
compresses them, and the convolutions after the log carry most of the time. Measured on DNSMOS
(docs/BENCHMARKS.md, issue 41, 2026-12-07): NNCF's defaults moved its scores by 34 %, the same
with the front end in float by 2 % at the same speed (3.6x over ONNX Runtime FP32), and the
accuracy control from there reverted 2 of 10 quantizers (2.9x, a search of 38 s) where from the
defaults it reverted 15 of 18 (2.2x, in an Auto run of 13 minutes against 8.5).

The accuracy control's rule reads the variants already made (the careful ones with them): an
int8_nncf_ov variant was judged and timed, was significantly faster than the original, and
missed the budget; none of them both paid and kept the budget (then nothing is to be won
back), and no accuracy-controlled variant is there yet.
The one offered takes the missed variant's options (its flavour, preset) and its inference
precision: int8_nncf_ov_ac for one at the passes' precision, int8_nncf_ov_ac_bf16 for the
variant whose rest ran in BF16 (timed on the same file, quantized once).

Both recipes run one search: the pass judges NNCF's candidates compiled in FP32 whatever
precision the variant then runs at. So when int8_nncf_ov_ac came out without a file (the task
not kept within its reversions or its time), its BF16 twin is not searched again: it is set
aside with that outcome (`same_search`), which on a large model saves the search's minutes.
"""

from __future__ import annotations

from collections.abc import Sequence

from optistudio.core.errors import ErrorInfo
from optistudio.core.measure.compare import FASTER
from optistudio.core.optimize.recipes import (
    BUILTIN_RECIPES,
    CAREFUL_CALIBRATION,
    Recipe,
    RecipeStep,
)
from optistudio.core.optimize.variant import VariantResult

QUANTIZE_PASS = "int8_nncf_ov"
CONTROLLED_PASS = "int8_nncf_ov_ac"
CONTROLLED_RECIPES = {None: "int8_nncf_ov_ac", "bf16": "int8_nncf_ov_ac_bf16"}
"""The accuracy-controlled recipe for each inference precision the missed variant ran at."""
CAREFUL_RECIPES = {None: "int8_nncf_ov_careful", "bf16": "int8_nncf_ov_careful_bf16"}
"""The carefully calibrated recipe for each inference precision the missed variant ran at."""


def offer_careful_calibration(variants: Sequence[VariantResult]) -> list[Recipe]:
    """The carefully calibrated recipes Auto adds before the accuracy control (module
    docstring): where an int8_nncf_ov variant calibrated as NNCF does by default was faster and
    out of budget, none paid, and none was calibrated with care yet; [] otherwise."""
    made = _quantized(variants)
    if any(_careful(v) for v in made) or _one_paid(made):
        return []
    offered: dict[str, Recipe] = {}
    for variant in made:
        name = CAREFUL_RECIPES.get(variant.recipe.precision)
        missed = variant.verdict == FASTER and not variant.within_budget
        if missed and name is not None and name not in offered:
            (step,) = variant.recipe.steps
            front = front_end(variant)
            config = {**step.config, **CAREFUL_CALIBRATION, **front}
            offered[name] = _labelled(BUILTIN_RECIPES[name], front).model_copy(
                update={"steps": [RecipeStep(step=QUANTIZE_PASS, config=config)]}
            )
    return sorted(offered.values(), key=lambda r: r.precision is not None)


def _quantized(variants: Sequence[VariantResult]) -> list[VariantResult]:
    """The judged int8_nncf_ov variants (calibrated by default or with care)."""
    return [v for v in variants if _steps(v) == [QUANTIZE_PASS] and v.judged]


def _one_paid(made: Sequence[VariantResult]) -> bool:
    """Whether one of them both kept the budget and was significantly faster."""
    return any(v.within_budget and v.verdict == FASTER for v in made)


def _careful(variant: VariantResult) -> bool:
    (step,) = variant.recipe.steps
    return CAREFUL_CALIBRATION.items() <= step.config.items()


def offer_accuracy_control(variants: Sequence[VariantResult]) -> list[Recipe]:
    """The accuracy-controlled recipes Auto adds (module docstring); [] when none applies."""
    if any(_steps(v) == [CONTROLLED_PASS] for v in variants):
        return []
    made = _quantized(variants)
    if _one_paid(made):
        return []
    missed = [v for v in made if v.verdict == FASTER and not v.within_budget]
    offered: dict[str, Recipe] = {}
    for variant in missed:
        name = CONTROLLED_RECIPES.get(variant.recipe.precision)
        if name is not None and name not in offered:
            offered[name] = controlled(variant, name)
    return sorted(offered.values(), key=lambda r: r.precision is not None)


def controlled(variant: VariantResult, name: str) -> Recipe:
    """Recipe `name` with the options of the variant's int8_nncf_ov step (model_type, ...),
    its log front end kept in float where the model computes one (`front_end`)."""
    (step,) = variant.recipe.steps
    front = front_end(variant)
    recipe = _labelled(BUILTIN_RECIPES[name], front)
    config = {**step.config, **front}
    return recipe.model_copy(update={"steps": [RecipeStep(step=CONTROLLED_PASS, config=config)]})


FRONT_END_LABEL = ", log front end in float"
"""Added to an offered recipe's label where it keeps the log front end in float."""


def _labelled(recipe: Recipe, front: dict[str, bool]) -> Recipe:
    """`recipe` whose label says so where `front` keeps the log front end in float."""
    return recipe.model_copy(update={"label": recipe.label + FRONT_END_LABEL}) if front else recipe


def as_offered(named: Recipe, offered: Recipe) -> Recipe:
    """`named` (the offered recipe's name resolved for its backend, 'INT8 ... on openvino') with
    the offer's steps and label, the backend's part of the label kept."""
    resolved = named.label.removeprefix(BUILTIN_RECIPES[offered.name].label)
    return named.model_copy(update={"steps": offered.steps, "label": offered.label + resolved})


def front_end(variant: VariantResult) -> dict[str, bool]:
    """{"float_front_end": True} where the missed variant's quantization found ops feeding a Log
    (a spectrum computed in the graph: optistudio.core.passes.nncf_openvino.log_front_end) and
    quantized them; {} otherwise (module docstring)."""
    details = variant.steps[0].details if variant.steps else {}
    quantized = details.get("log_front_end_ops", 0) and not details.get("float_front_end")
    return {"float_front_end": True} if quantized else {}


def _steps(variant: VariantResult) -> list[str]:
    return _steps_of(variant.recipe)


def _steps_of(recipe: Recipe) -> list[str]:
    return [step.step for step in recipe.steps]


def searched_without_a_file(
    recipe: Recipe, backend: str, variants: Sequence[VariantResult]
) -> VariantResult | None:
    """The variant that already ran `recipe`'s search (the same accuracy-controlled steps on the
    same backend at the passes' precision) and whose passes kept no file (no step report: they
    raised); None when none did, `recipe` is that variant's own precision (module docstring) or
    no search (a careful calibration that raised runs again at its twin's precision). A variant
    whose file was made and then failed to load, judge or time at its precision is not one:
    the twin runs that file at another."""
    if recipe.precision is None or _steps_of(recipe) != [CONTROLLED_PASS]:
        return None
    return next(
        (
            v
            for v in variants
            if v.status != "made"
            and v.error is not None
            and not v.steps
            and v.backend == backend
            and v.recipe.precision is None
            and v.recipe.steps == recipe.steps
        ),
        None,
    )


def same_search(recipe: Recipe, backend: str, searched: VariantResult) -> VariantResult:
    """`recipe`'s variant with the outcome of `searched`, which ran the same search: not
    applicable (or failed) with its sentence, saying the search was not run twice."""
    assert searched.error is not None
    result = VariantResult(recipe=recipe, precision=recipe.precision or "fp32", backend=backend)
    said = searched.error.message.removeprefix("Not applicable to this graph: ")
    error = ErrorInfo(
        code=searched.error.code,
        message=f"{searched.recipe.name} ran the same search (its candidates are judged in FP32 "
        f"whatever precision the variant then runs at), not run again: {said}",
        hint=searched.error.hint,
    )
    if searched.status == "not_applicable":
        result.set_aside(error)
    else:
        result.fail(error)
    return result
