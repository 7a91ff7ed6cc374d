"""How a recipe's variant file is made: its passes in order, or an earlier variant's file when
the recipe differs from it only in its inference precision, then intake's checks on it.

Each step's file declares the outputs its input declares (`passes.declared_outputs`): a tool's
shape inference re-declares them (onnxslim made AECMOS's [batch_size] [batch_size, 2]), and a
variant that declares other outputs reads as another model. Only a pass there to change them
(`PassInfo.changes_outputs`: free-dims, dynamic batch) hands on its own declaration.

A recipe that leaves the model as it is (fp32, bf16 at run time) still gets its own copy, with
the external data files the original names. The passes' precision combines step by step: int8
after fp32 is int8, fp16 after int8 is mixed.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import onnx
from onnx.external_data_helper import ExternalDataInfo, uses_external_data

from optistudio.core.errors import ModelRejected, PassFailed
from optistudio.core.model.declared_sizes import model_tensors
from optistudio.core.model.info import ModelInfo
from optistudio.core.model.intake import inspect_model
from optistudio.core.optimize.recipes import Recipe, RecipeStep
from optistudio.core.optimize.variant import StepReport, VariantResult
from optistudio.core.passes.base import PassContext, passes
from optistudio.core.passes.declared_outputs import keep_declared_outputs

NO_SIZE_LIMIT = 2**62
"""A variant is checked like an upload, but never refused for its size here (storing may)."""


def run_recipe(
    model: Path, recipe: Recipe, folder: Path, context: PassContext
) -> tuple[Path, list[StepReport], str]:
    """Apply the recipe's passes in order; returns the final file, step reports and precision."""
    folder.mkdir(parents=True, exist_ok=True)
    current, steps, precision = model, [], "fp32"
    for number, step in enumerate(recipe.steps, start=1):
        info = passes.get(step.step)
        out = folder / f"{number:02d}-{step.step}.onnx"
        result = info.run(current, out, step.config, context)
        details = result.details | _kept_outputs(current, result.output, info.changes_outputs)
        steps.append(StepReport(step=step.step, details=details, warnings=result.warnings))
        current, precision = result.output, _precision(precision, info.produces_precision)
    final = folder / f"model{current.suffix}"  # .tflite after a LiteRT conversion
    copy_model(current, final)
    return final, steps, precision


def _kept_outputs(source: Path, made: Path, changes_outputs: bool) -> dict[str, int]:
    """Give the step's file the outputs its input declares, unless the pass is there to change
    them (`declared_outputs`); the step's detail when it had re-declared any."""
    if changes_outputs or {source.suffix, made.suffix} != {".onnx"} or made.samefile(source):
        return {}
    kept = keep_declared_outputs(source, made)
    return {"declared_outputs_kept": kept} if kept else {}


def copy_model(source: Path, target: Path) -> None:
    """Copy an .onnx file and the external data files it names (intake checked that they sit
    inside its folder), so a recipe that leaves the model as it is keeps its weights; an
    OpenVINO IR (.xml) with its weights (.bin)."""
    shutil.copyfile(source, target)
    if source.suffix == ".xml" and source.with_suffix(".bin").is_file():
        shutil.copyfile(source.with_suffix(".bin"), target.with_suffix(".bin"))
    if source.parent.resolve() == target.parent.resolve() or source.suffix != ".onnx":
        return
    proto = onnx.load(source, load_external_data=False)
    for location in {
        ExternalDataInfo(t).location for t in model_tensors(proto) if uses_external_data(t)
    }:
        (target.parent / location).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source.parent / location, target.parent / location)


def made_earlier(
    recipe: Recipe, backend: str, variants: Sequence[VariantResult]
) -> VariantResult | None:
    """An earlier made variant with the same passes on the same backend at the precision they
    leave, when `recipe` differs from it only in its inference precision (int8_nncf_bf16 after
    int8_nncf): that variant's file is timed at the new precision instead of quantizing again."""
    if not recipe.steps or recipe.precision is None:
        return None
    return next(
        (
            v
            for v in variants
            if v.status == "made"
            and v.path
            and v.backend == backend
            and v.recipe.precision is None
            and v.recipe.steps == recipe.steps
        ),
        None,
    )


def run_precision(produced: str, runtime: str | None) -> str:
    """What a variant computes in: the passes' precision ('int8') at the recipe's inference
    precision: 'bf16' for a float model, 'int8+bf16' for a quantized one (its int8 layers stay
    int8, the rest runs in bf16)."""
    if runtime is None or runtime == produced:
        return produced
    return runtime if produced == "fp32" else f"{produced}+{runtime}"


def made_file(
    model: Path,
    recipe: Recipe,
    out_dir: Path,
    context: PassContext,
    earlier: VariantResult | None,
) -> tuple[Path, list[StepReport], str]:
    """The recipe's file, step reports and the passes' precision: made by its passes, or the
    file of `earlier` (made_earlier), its steps marked with the recipe that made it, and where
    the recipe has more steps than `earlier`'s (a static-shapes step after them,
    optistudio.core.optimize.static_offer) those run on that file."""
    if earlier is None or earlier.path is None:
        return run_recipe(model, recipe, out_dir / recipe.name, context)
    mark = {"file_of": earlier.recipe.name}
    steps = [step.model_copy(update={"details": step.details | mark}) for step in earlier.steps]
    rest = recipe.steps[len(earlier.recipe.steps) :]
    if not rest:
        return Path(earlier.path), steps, earlier.precision
    done = passes_precision(earlier.recipe.steps)
    more = recipe.model_copy(update={"steps": rest})
    path, made, precision = run_recipe(Path(earlier.path), more, out_dir / recipe.name, context)
    return path, steps + made, _precision(done, precision)


def passes_precision(steps: Sequence[RecipeStep]) -> str:
    """The precision a recipe's passes leave, combined step by step ('int8' after NNCF)."""
    precision = "fp32"
    for step in steps:
        precision = _precision(precision, passes.get(step.step).produces_precision)
    return precision


def check_variant(path: Path, recipe: Recipe) -> ModelInfo | None:
    """Intake's checks on a file a recipe made; a refusal is the recipe's failure (PassFailed),
    never advice to re-export the user's model. A .tflite is checked by loading it on litert,
    an OpenVINO IR (.xml) on openvino."""
    if path.suffix in (".tflite", ".xml"):
        return None
    try:
        return inspect_model(path, max_bytes=NO_SIZE_LIMIT)
    except ModelRejected as exc:
        raise PassFailed(
            f"The {recipe.label} recipe made a model that the checks refuse: {exc.message}",
            hint="The recipe, not your model, is at fault: use the other variants, or report "
            "this with the model.",
        ) from exc


def _precision(current: str, produced: str) -> str:
    order = {"fp32": 0, "fp16": 1, "int8": 1, "mixed": 2}
    if current != "fp32" and produced not in ("fp32", current):
        return "mixed"
    return produced if order.get(produced, 0) >= order.get(current, 0) else current
