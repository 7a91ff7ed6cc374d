"""`optistudio optimize` and `optistudio recipes`: variants of a model from the command line."""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from optistudio.cli.args import (
    add_input_flags,
    input_options,
    parse_float_list,
    parse_int_list,
    validated,
)
from optistudio.cli.errors import EXIT_REFUSED, job_failure
from optistudio.cli.output import print_json

if TYPE_CHECKING:
    from optistudio.core.optimize.run import OptimizeReport
    from optistudio.services.jobresults import OptimizeJobResult


def add_optimize_parser(commands: Any) -> None:
    """`optimize` and `recipes` on the CLI's subcommands."""
    optimize = commands.add_parser("optimize", help="make optimized variants of a model")
    optimize.add_argument(
        "model",
        type=Path,
        help="path to an .onnx file, or a decoder's folder (genai_config.json, "
        "tokenizer files beside its .onnx)",
    )
    optimize.add_argument(
        "--recipe",
        action="append",
        default=[],
        help="recipe name or 'auto' (repeatable; default auto). See `optistudio recipes`.",
    )
    _add_data_flags(optimize)
    _add_task_flags(optimize)
    _add_training_flags(optimize)
    _add_budget_flags(optimize)
    _add_target_flags(optimize)
    add_input_flags(optimize)
    optimize.add_argument("--out", type=Path, required=True, help="folder for the variant files")
    optimize.add_argument("--json", action="store_true", help="print one JSON object")
    optimize.add_argument("--save", action="store_true", help="store everything in the database")
    recipes = commands.add_parser("recipes", help="list the optimization recipes and passes")
    recipes.add_argument("--json", action="store_true", help="print one JSON object")


def _add_data_flags(optimize: argparse.ArgumentParser) -> None:
    """The evaluation and calibration data: its file, how images are read, its labels."""
    optimize.add_argument(
        "--calib",
        type=Path,
        help=".npz of named input arrays (samples first), or a folder or .zip of images; a "
        "decoder: a .txt (tokenized by the tokenizer.json beside it) or token ids as .npy",
    )
    optimize.add_argument("--image-size", type=parse_int_list, help="images: H,W to resize to")
    optimize.add_argument("--image-layout", choices=["NCHW", "NHWC"], help="images: layout")
    optimize.add_argument("--image-color", choices=["RGB", "BGR", "GRAY"], help="images: colour")
    optimize.add_argument("--image-mean", type=parse_float_list, help="images: per-channel mean")
    optimize.add_argument("--image-std", type=parse_float_list, help="images: per-channel std")
    optimize.add_argument(
        "--labels",
        type=Path,
        help="labels, one per sample, read by the task: class ids (.npy/.csv), strings (.txt, "
        "a line each), boxes (.json)",
    )


def _add_task_flags(optimize: argparse.ArgumentParser) -> None:
    """The task variants are judged in and its budget."""
    optimize.add_argument(
        "--task",
        help="the task variants are judged in (default: recognized from the outputs; 'none': "
        "cosine and top-1 only). See `optistudio recipes --json` for the tasks and metrics",
    )
    optimize.add_argument(
        "--budget",
        action="append",
        default=[],
        metavar="METRIC=LIMIT",
        help="a limit in the task's terms (repeatable), e.g. string_agreement=0.99, "
        "top1_drop=0.01; the metric's direction decides the side. Default: the task's budget",
    )
    optimize.add_argument(
        "--speed-only",
        action="store_true",
        help="let Auto choose INT8 variants whose accuracy nobody checked in a task: calibrated "
        "on random inputs (no --calib and no built-in samples fit), or on built-in samples with "
        "no task recognized",
    )


def _add_training_flags(optimize: argparse.ArgumentParser) -> None:
    """The qat recipe's training data."""
    optimize.add_argument(
        "--train",
        type=Path,
        help="training inputs for the qat recipe (.npz, or a folder or .zip of images), kept "
        "apart from --calib, which stays the held-out evaluation",
    )
    optimize.add_argument(
        "--train-labels", type=Path, help="class ids of --train (.npy/.csv); none: distillation"
    )
    optimize.add_argument("--epochs", type=int, help="qat: at most this many epochs (8)")


def _add_budget_flags(optimize: argparse.ArgumentParser) -> None:
    """The generic budget (cosine, top-1), timing, and the output judged."""
    optimize.add_argument("--budget-cosine", type=float, help="least mean output cosine (0.99)")
    optimize.add_argument("--budget-top1-drop", type=float, help="largest top-1 drop (0.01)")
    optimize.add_argument("--seconds", type=float, help="timing per variant vs the original")
    optimize.add_argument(
        "--accuracy-output", help="output the accuracy budget judges (default: the first)"
    )


def _add_target_flags(optimize: argparse.ArgumentParser) -> None:
    """The backend the variants are for; how Auto ranks a decoder."""
    optimize.add_argument(
        "--target",
        help="backend the variants are for: 'any' (default: every backend here, Auto picks "
        "the backend too), onnxruntime, openvino or litert (.tflite variants; needs the "
        "litert extra)",
    )
    optimize.add_argument(
        "--rank-by",
        choices=["tokens_per_s", "ttft", "throughput"],
        help="decoders: what Auto ranks by within the perplexity budget (default tokens_per_s: "
        "greedy decoding at batch 1; ttft: time to first token; throughput: tokens/s at "
        "--rank-batch)",
    )
    optimize.add_argument(
        "--rank-batch", type=int, help="decoders: the batch of --rank-by throughput (4)"
    )


def optimize_spec(args: argparse.Namespace, *, decoder: bool = False) -> Any:
    """The job spec the flags say; a `decoder` is fed by its decoding loop, so the input
    flags' sizes are not resolved against it."""
    from optistudio.services.jobkinds import OptimizeJobSpec

    budget = {"min_cosine": args.budget_cosine, "max_top1_drop": args.budget_top1_drop}
    fields: dict[str, Any] = {
        "recipes": [r for text in args.recipe for r in text.split(",") if r] or ["auto"],
        "budget": {k: v for k, v in budget.items() if v is not None},
        "data_path": str(args.calib.resolve()) if args.calib else None,
        "labels_path": str(args.labels.resolve()) if args.labels else None,
        "accuracy_output": args.accuracy_output,
        "image_preprocessing": _image_preprocessing(args),
        "target_backend": args.target,
        "task": args.task,
        "budgets": _budgets(args.budget),
        "speed_only": args.speed_only or None,
        "pass_settings": _qat_settings(args),
        "decoder": _decoder_settings(args),
    } | input_options(args, resolve=args.calib is None and not decoder).fields()
    if args.seconds is not None:
        fields["comparison"] = {"min_seconds": args.seconds, "max_seconds": 10 * args.seconds}
    return validated(OptimizeJobSpec, fields, "optimize")


def _decoder_settings(args: argparse.Namespace) -> dict[str, Any] | None:
    """--rank-by and --rank-batch as the spec's decoder settings."""
    given = {"rank_by": getattr(args, "rank_by", None), "batch": getattr(args, "rank_batch", None)}
    chosen = {key: value for key, value in given.items() if value is not None}
    return chosen or None


def _qat_settings(args: argparse.Namespace) -> dict[str, dict[str, Any]] | None:
    """--train, --train-labels and --epochs as the qat pass's settings (images read with the
    --image-* flags, like --calib)."""
    given = {
        "train_path": str(args.train.resolve()) if args.train else None,
        "train_labels_path": str(args.train_labels.resolve()) if args.train_labels else None,
        "epochs": args.epochs,
    }
    settings: dict[str, Any] = {key: value for key, value in given.items() if value is not None}
    if args.train and _image_preprocessing(args) and args.train.suffix.lower() != ".npz":
        settings["image_preprocessing"] = _image_preprocessing(args)
    return {"qat": settings} if settings else None


def _budgets(texts: list[str]) -> dict[str, float]:
    """'METRIC=LIMIT' strings (--budget) by metric; InvalidSpec names a bad one."""
    from optistudio.core.errors import InvalidSpec

    limits = {}
    for text in texts:
        name, sep, limit = text.partition("=")
        try:
            value = float(limit)
        except ValueError:
            value = None
        if not sep or not name.strip() or value is None:
            raise InvalidSpec(
                f"Bad budget {text!r}: expected METRIC=LIMIT.",
                hint="For example --budget string_agreement=0.99",
            )
        limits[name.strip()] = value
    return limits


def _image_preprocessing(args: argparse.Namespace) -> dict[str, Any] | None:
    given = {
        "size": args.image_size,
        "layout": args.image_layout,
        "color": args.image_color,
        "mean": args.image_mean,
        "std": args.image_std,
    }
    chosen = {key: value for key, value in given.items() if value is not None}
    return chosen or None


def command_optimize(args: argparse.Namespace) -> int:
    """Variants per recipe, each with accuracy and speedup measured in this run.

    A recipe that failed is listed with its reason (and on stderr); the exit code is 2 only
    when no variant could be made."""
    from optistudio.core.llm.folder import decoder_path, is_decoder_file
    from optistudio.services.settings import get_settings

    settings = get_settings()
    args.model = decoder_path(args.model)  # a decoder's folder: its .onnx
    decoder = is_decoder_file(args.model)
    spec = optimize_spec(args, decoder=decoder)
    from optistudio.core.backends.loadable import check_loads
    from optistudio.core.model.intake import inspect_model

    info = inspect_model(args.model, load_check=check_loads)
    if args.save:
        report, stored = _optimize_and_save(args.model, spec, settings)
    elif decoder:
        report, stored = _optimize_decoder_here(args.model, spec, args.out), {}
    else:
        report, stored = _optimize_here(args.model, info, spec, args.out), {}
    files = _export_variants(report, args.out)
    if args.json:
        payload = report.model_dump(mode="json") | stored | {"files": files}
        print_json(payload)
    else:
        _print_variants(report)
    _report_failures(report)
    return 0 if report.made else EXIT_REFUSED


def _optimize_here(model: Path, info: Any, spec: Any, out: Path) -> OptimizeReport:
    """The optimization report, made in this process."""
    from optistudio.core.optimize.run import optimize

    data, labels = spec.open_data(info.inputs)
    work = out / "work"
    return optimize(model, spec.optimize_spec(), out_dir=work, data=data, labels_file=labels)


def _optimize_decoder_here(model: Path, spec: Any, out: Path) -> OptimizeReport:
    """A decoder's optimization report, judged on the --calib text (else built-in text)."""
    from optistudio.core.optimize.run import optimize

    text = Path(spec.data_path) if spec.data_path else None
    return optimize(model, spec.optimize_spec(), out_dir=out / "work", text=text)


def _optimize_and_save(
    model_path: Path, spec: Any, settings: Any
) -> tuple[OptimizeJobResult, dict[str, int]]:
    """Store the model, then run the optimization through a job row exactly as a worker does."""
    from optistudio.db.models import JobKind, JobStatus
    from optistudio.db.queries import create_job, get_job
    from optistudio.db.session import make_session_factory, transaction
    from optistudio.services.catalog import add_model_file
    from optistudio.services.jobkinds import OPTIMIZE
    from optistudio.services.migrate import upgrade
    from optistudio.workers.jobs import run_job
    from optistudio.workers.work import work_of

    upgrade(settings.database_url, lock_dir=settings.data_dir)
    factory = make_session_factory(settings.database_url)
    entry = add_model_file(factory, settings, model_path, name=model_path.stem, origin="cli")
    with transaction(factory) as s:
        job_id = create_job(
            s, kind=JobKind.optimize, spec=spec.model_dump(mode="json"), model_id=entry.model_id
        ).id
    work = work_of(JobKind.optimize)
    run_job(factory, job_id, worker=f"cli@{socket.gethostname()}", task_id=None, work=work)
    with transaction(factory) as s:
        job = get_job(s, job_id=job_id)
        if job is None or job.status != JobStatus.succeeded:
            raise job_failure(job, job_id)
        result = OPTIMIZE.parse_result(job.result or {})
    return result, {"model_id": entry.model_id, "job_id": job_id}


def _export_variants(report: OptimizeReport, out: Path) -> dict[str, str]:
    """Copy each variant to OUT/<recipe>.onnx (.tflite for LiteRT, .xml with its .bin for an
    OpenVINO IR), a decoder's to OUT/<recipe>/ with its weights, configs and tokenizer;
    returns recipe -> file."""
    import shutil

    from optistudio.core.llm.folder import decoder_files

    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for variant in report.variants:
        if not variant.path:
            continue
        source = Path(variant.path)
        if variant.decoding is None:
            target = out / f"{variant.recipe.name}{source.suffix}"  # .tflite too
            shutil.copyfile(source, target)
            if source.suffix == ".xml":  # an OpenVINO IR: its weights beside it
                shutil.copyfile(source.with_suffix(".bin"), target.with_suffix(".bin"))
        else:
            (out / variant.recipe.name).mkdir(exist_ok=True)
            for file in decoder_files(source):
                shutil.copyfile(file, out / variant.recipe.name / file.name)
            target = out / variant.recipe.name / source.name
        files[variant.recipe.name] = str(target)
    return files


def _print_samples(report: OptimizeReport) -> None:
    """A warning under the data line when the variants were judged on anything but the
    user's data: the built-in samples, or random inputs."""
    if any(v.builtin_samples for v in report.variants):
        print(
            "  not your data: every variant was judged on these built-in samples, the INT8 "
            "ones calibrated on others; give --calib FILE to confirm"
        )
    elif any(v.calibrated_on_random for v in report.variants):
        print("  not your data: random inputs; INT8 calibrated on them is left out (--calib FILE)")


def _print_task(report: OptimizeReport) -> None:
    """The task judging the variants, how sure recognition was and its reasons; or why none."""
    if report.task:
        limits = ", ".join(f"{name}={limit:g}" for name, limit in report.task_budget.items())
        sure = f", {report.task_confidence} confidence" if report.task_confidence else ""
        print(f"task: {report.task}{sure} ({report.task_reason}); budget: {limits}")
        shown = report.task_reasons if report.task_confidence else []  # set by the user
    else:
        if report.task_reason:
            print(f"task: none ({report.task_reason}); judged by output cosine and top-1")
        shown = report.task_reasons[1:]
    for reason in shown:
        print(f"  {reason}")


def _print_variants(report: OptimizeReport) -> None:
    print(f"data: {report.data}")
    if report.task == "text_generation" and any(v.decoding for v in report.variants):
        _print_decoder_variants(report)
        return
    _print_samples(report)
    _print_task(report)
    print(
        f"{'recipe':<34}{'prec':>6}{'speedup':>9}{'95% CI':>15}{'cosine':>9}{'budget':>8}  verdict"
    )
    for v in report.variants:
        name = v.recipe.name + (" *" if v.recipe.name == report.chosen else "")
        if v.status == "failed":
            print(f"{name:<34}{v.precision:>6}  failed ({v.error.code.value if v.error else '?'})")
            continue
        if v.status == "not_applicable":
            print(f"{name:<34}{v.precision:>6}  not applicable {v.not_applicable_where()}")
            continue
        ci = f"{1 / v.ratio_high:.2f}-{1 / v.ratio_low:.2f}x"
        cosine = v.accuracy.mean_cosine
        budget = "ok" if v.within_budget else "miss"
        print(
            f"{name:<34}{v.precision:>6}{v.speedup:>8.2f}x{ci:>15}{cosine:>9.4f}"
            f"{budget:>8}  {v.verdict}"
        )
        print(f"{'':<4}{v.budget_note}")
    print(f"* chosen: {report.chosen or 'none (keep the original)'}")
    print(report.headline)
    for note in report.notes:
        print(f"note: {note}")


def _print_decoder_variants(report: OptimizeReport) -> None:
    """A decoder's variants: speed against FP32 at the ranked figure, tokens/s at batch 1,
    TTFT, perplexity increase, top-1 agreement and size, each next to the original's."""
    from optistudio.core.llm.choice import RANK_LABELS

    limits = ", ".join(f"{name}={limit:g}" for name, limit in report.task_budget.items())
    print(f"task: text_generation ({report.task_reason}); budget: {limits}")
    print(
        f"{'recipe':<24}{'speedup':>9}{'95% CI':>13}{'tok/s b1':>16}{'TTFT ms':>15}"
        f"{'ppl':>9}{'top-1':>7}{'MB':>14}  budget"
    )
    for v in report.variants:
        name = v.recipe.name + (" *" if v.recipe.name == report.chosen else "")
        found, accuracy = v.decoding, v.accuracy
        if v.status == "failed" or found is None or accuracy is None:
            print(f"{name:<24}  failed ({v.error.code.value if v.error else '?'})")
            continue
        ci = f"{1 / found.ranked().high:.2f}-{1 / found.ranked().low:.2f}x"
        speed = f"{found.tokens_per_s:.0f}/{found.original_tokens_per_s:.0f}"
        ttft = f"{found.ttft_ms:.1f}/{found.original_ttft_ms:.1f}"
        size = f"{found.size_bytes / 1e6:.1f}/{found.original_size_bytes / 1e6:.1f}"
        ppl = accuracy.metric("perplexity_increase")
        top1 = accuracy.metric("top1_agreement")
        print(
            f"{name:<24}{v.speedup or 0:>8.2f}x{ci:>13}{speed:>16}{ttft:>15}"
            f"{ppl if ppl is not None else float('nan'):>+9.2%}"
            f"{top1 if top1 is not None else float('nan'):>7.3f}{size:>14}"
            f"  {'ok' if v.within_budget else 'miss'}"
        )
    ranked = next((v.decoding.rank_by for v in report.variants if v.decoding), "tokens_per_s")
    print(f"  a/b: variant/original; speedup and CI at {RANK_LABELS[ranked]}")
    print(f"* chosen: {report.chosen or 'none (keep the original)'}")
    print(report.headline)
    for note in report.notes:
        print(f"note: {note}")


def _report_failures(report: OptimizeReport) -> None:
    """Each failed recipe's reason and hint, then each not applicable one's, on stderr."""
    for variant in report.not_applicable:
        print(f"{variant.recipe.name}: {variant.why_not_applicable()}", file=sys.stderr)
    for variant in report.failed:
        error = variant.error
        message = error.message if error else "no reason recorded"
        print(f"failed: {variant.recipe.name}: {message}", file=sys.stderr)
        if error and error.hint:
            print(f"  hint: {error.hint}", file=sys.stderr)
    if (report.failed or report.not_applicable) and not report.made:
        print("error: no variant could be made", file=sys.stderr)


def command_recipes(args: argparse.Namespace) -> int:
    """The recipes (each with its passes) and the registered passes, as a list or JSON."""
    if args.json:
        print_json(recipes_payload())
        return 0
    from optistudio.core.machine.environment import int8_choice
    from optistudio.core.optimize.applicability import ONNXRUNTIME_NOTES, applicable_recipes
    from optistudio.core.optimize.recipes import BUILTIN_RECIPES
    from optistudio.core.passes.base import passes

    print("recipes: auto (candidates chosen for the model), " + ", ".join(BUILTIN_RECIPES))
    for info in passes:
        print(f"  pass {info.name:<14} {info.label}: {info.description}")
    print(f"on this CPU: {int8_choice().sentence()}")
    for found in applicable_recipes().values():
        if not found.applies:
            print(f"  not here: {found.recipe}: {found.why_not}")
    for note in ONNXRUNTIME_NOTES:
        print(f"  no {note.backend} {note.precision}: {note.why}")
    from optistudio.core.numerics.evaluators.base import evaluators

    print("tasks (--task; --budget METRIC=LIMIT, default budget marked *):")
    for task in evaluators:
        metrics = ", ".join(
            f"{m.name}{'*' if m.name in task.default_budget else ''}"
            f"({'higher' if m.higher_is_better else 'lower'})"
            for m in task.metrics
        )
        print(f"  {task.name:<16} {task.label}: {metrics}")
    return 0


def recipes_payload() -> dict[str, Any]:
    """Every recipe with its steps, 'auto' described, and every pass with what it needs."""
    from optistudio.core.machine.environment import int8_choice
    from optistudio.core.machine.precisions import native_floats
    from optistudio.core.numerics.evaluators.base import evaluators
    from optistudio.core.optimize.applicability import ONNXRUNTIME_NOTES, applicable_recipes
    from optistudio.core.optimize.recipes import AUTO, BUILTIN_RECIPES
    from optistudio.core.passes.base import passes

    applies = applicable_recipes()
    return {
        "auto": {
            "name": AUTO,
            "description": "The candidates that suit the model and this CPU, each timed; the "
            "fastest within the accuracy budget is chosen. Only recipes that apply here (each "
            "recipe's `applies`, else `why_not`) are candidates.",
            "int8": int8_choice().model_dump(),
            "floats": {fmt: found.model_dump() for fmt, found in native_floats().items()},
            "not_offered": [note.model_dump() for note in ONNXRUNTIME_NOTES],
        },
        "recipes": [
            recipe.model_dump(mode="json")
            | applies[name].model_dump(include={"applies", "why_not", "computes"})
            for name, recipe in BUILTIN_RECIPES.items()
        ],
        "passes": [
            {
                "name": info.name,
                "label": info.label,
                "description": info.description,
                "needs_calibration": info.needs_calibration,
                "produces_precision": info.produces_precision,
            }
            for info in passes
        ],
        "tasks": [
            task.model_dump(mode="json", exclude={"implementation", "priority"})
            for task in evaluators
        ],
    }
