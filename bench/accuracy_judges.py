"""Accuracy judges: each variant's cosine beside its task's own metric, and Auto judged by the task.

For each model, one `optimize` run (target 'any': every backend on this CPU) makes Auto's
candidates and the anchors' default recipes side by side, on the same data, judged by the same
task budget and timed the same way (each against FP32 on ONNX Runtime, interleaved, so every
speedup has a 95 % interval):

  anchors   int8_dynamic and int8_static (ONNX Runtime's quantizer, the built-in recipes),
            int8_nncf@openvino (NNCF INT8, CNN flavour, on OpenVINO), fp32@openvino (the model
            as it is on OpenVINO); where the CPU computes BF16 (AVX512-BF16 or AMX-BF16) also
            bf16@openvino (the model at OpenVINO's bf16 inference precision) and
            int8_nncf_bf16@openvino (NNCF INT8, the rest in BF16: OpenVINO's default for a
            quantized model there), timed in the same run; elsewhere they are skipped, and said
            so.
  Auto      the candidates `recipes=["auto"]` makes with target 'any'; its pick is
            optistudio.core.optimize.run.choose over them (the run's own rule), so the anchors
            that are not Auto candidates never enter it.

Then, per model:
  1. every variant's mean cosine to FP32 (on the judged output) beside its task metrics, with
     the two verdicts: a cosine budget (mean cosine >= 0.99) and the task budget;
  2. where the two verdicts part: the variants a cosine budget would accept that the task
     budget rejects, the reverse, and the pick Auto would have made under the cosine budget;
  3. Auto's pick (speedup [95 % CI]) against the fastest in-budget anchor, head to head
     (interleaved, each on its own backend) when both are variants. Target: Auto >= 1.05x the
     anchor, or a tie (no significant difference); never a pick outside the budget.

Models (all offline, cached under data/bench-models/accuracy-judges/):
  recognizer  PP-OCRv4 text recognizer (rapidocr-onnxruntime), --lines rendered text lines
              48x320 with their strings as labels (bench/ocr_data.py); budget string_agreement
  detector    PP-OCRv4 text detector, --pages rendered pages --page-size^2
              (bench/reference_models.rapidocr_det); no labels: agreement (box_f1, map_iou)
  classifier  a small CNN trained on scikit-learn digits (bench/reference_models.digits_cnn),
              450 held-out digits with labels; needs torch, so it is trained by --torch-python
              (default /work/zoo-venv/bin/python); budget top1_drop <= 0.01 (labels given)
  minilm      all-MiniLM-L6-v2 exported by --torch-python (bench/zoo_torch.py, opset 18),
              --pairs paraphrase pairs (bench/sentence_pairs.py), judged on sentence_embedding
              (recall_at_10 of the original's neighbours); the bench adds each variant's largest
              change of a pair's similarity, how many sentences keep their nearest neighbour,
              and the FP32 similarity of the closest top-10 neighbour it lost
Calibration and accuracy use the same data (there is no separate set); timing feeds synthetic
inputs of the data's shapes. Speed is printed as ratios only.

--zoo (or zoo names in --models): the zoo's real models (bench/zoo_judges.py: YOLOv8 and YOLOX
detectors, PicoDet, captcha recognizers, magika, Paddle classifiers...), which have no data: each
run is the one a user without data gets (built-in samples at the zoo's inputs, as --builtin
without its last column), and the row says whether the task was read right (the task right for
the model, read in its package's code). Issue 30's target on them: Auto's pick >= 0.9x the
fastest in-budget anchor of the same run.

At the end a table, one row per model: the task read (right or not), Auto's pick and its speedup
vs FP32 on ONNX Runtime, the fastest in-budget anchor and its speedup, their ratio and whether
the 0.9x target holds, with the machine's load during the model's run (other processes' cores,
steal: optistudio.core.machine.contention). --json prints that table as one JSON document on
stdout (everything else goes to stderr). --quick bounds each model's run: shorter timings (0.5 s,
at most 4 s a variant) and 16 built-in samples.

--builtin: the run a user without data gets (bench/builtin_check.py). The optimize run gets no
data: every variant is judged on built-in samples at the data's sample sizes, the INT8 ones
calibrated on other built-in samples, and Auto chooses among them; then each variant is judged
again on the case's data (and labels), a last column, and Auto's pick is said to hold there or
not. The anchors are timed in the same run as without --builtin.

Run: .venv/bin/python bench/accuracy_judges.py [--models recognizer,detector,classifier,minilm]
     [--seconds 1] [--threads 1] [--lines 48] [--pages 12] [--page-size 320] [--pairs 16]
     [--budget classifier:top1_drop=0.01] [--builtin] [--zoo] [--quick] [--json]
     .venv/bin/python bench/accuracy_judges.py --zoo --quick --json > zoo-judges.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("NNCF_CI", "1")  # no telemetry
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import builtin_check  # noqa: E402
import ocr_data  # noqa: E402
import reference_models  # noqa: E402
import sentence_pairs as pairs_data  # noqa: E402
import zoo_judges  # noqa: E402

from optistudio.core.data.datasets import NpzDataset  # noqa: E402
from optistudio.core.data.inputs import sample_dims  # noqa: E402
from optistudio.core.machine.contention import ContentionMonitor  # noqa: E402
from optistudio.core.machine.environment import isa_flags  # noqa: E402
from optistudio.core.machine.precisions import native_float  # noqa: E402
from optistudio.core.measure.compare import (  # noqa: E402
    FASTER,
    NO_DIFFERENCE,
    SLOWER,
    Comparison,
    ComparisonSpec,
    compare_models,
)
from optistudio.core.model.intake import inspect_model  # noqa: E402
from optistudio.core.optimize.recipes import resolve_recipes  # noqa: E402
from optistudio.core.optimize.run import (  # noqa: E402
    OptimizeReport,
    OptimizeSpec,
    VariantResult,
    available_backends,
    choose,
    optimize,
)

MODELS = ("recognizer", "detector", "classifier", "minilm")
RIGHT_TASKS = {
    "recognizer": "ctc_text",
    "detector": "detection_map",
    "classifier": "classification",
    "minilm": "embedding",
}
FOLDER = reference_models.DEFAULT_FOLDER / "accuracy-judges"
COSINE_LIMIT = 0.99
TARGET = 1.05
ANCHORS = {
    "int8_dynamic": "ORT int8_dynamic",
    "int8_static": "ORT int8_static",
    "int8_nncf@openvino": "NNCF INT8 on OpenVINO",
    "fp32@openvino": "OpenVINO FP32",
    "bf16@openvino": "OpenVINO BF16",
    "int8_nncf_bf16@openvino": "NNCF INT8, the rest in BF16, on OpenVINO",
}
BF16_ANCHORS = ["bf16", "int8_nncf_bf16"]
"""Named so under target 'any' (pinned to OpenVINO); only where the CPU computes BF16."""
SHOWN = {  # the task metrics printed beside cosine, the budget's first
    "ctc_text": ("string_agreement", "cer", "accuracy_candidate", "accuracy_drop"),
    "detection_map": ("box_f1", "map_iou", "box_recall", "box_precision"),
    "classification": (
        "top1_drop",
        "clear_top1_disagreement",
        "top1_disagreement",
        "top1_accuracy_candidate",
    ),
    "embedding": ("recall_at_10", "min_cosine"),
}
DIGITS = """
import sys
sys.path.insert(0, sys.argv[1])
import reference_models
reference_models._check_ort = lambda *args: 0.0  # this interpreter has no ONNX Runtime
print(*reference_models.digits_cnn(reference_models.Path(sys.argv[2])), sep="\\n")
"""


@dataclass
class Case:
    """One model, its data, how it is judged and timed."""

    name: str
    path: Path
    data: NpzDataset | None
    """None: a model without data (a zoo case), run on built-in samples at `inputs`."""
    data_note: str
    comparison: ComparisonSpec
    labels_file: Path | None = None
    output: str | None = None
    budgets: dict[str, float] = field(default_factory=dict)
    extra: Callable[[Case, VariantResult], str] | None = None
    extra_label: str = ""
    builtin: bool = False
    """No data for the run: built-in samples, each variant then judged on `data` too."""
    inputs: dict[str, Any] = field(default_factory=dict)
    """The spec's shapes and values for a case without data (the zoo's inputs)."""
    right_task: str | None = None
    """The task that is right for the model; None where it is not clear."""
    samples: int = 32
    """Built-in samples the run judges on when it has no data."""


# --------------------------------------------------------------------------- models and data


def _timing(args: argparse.Namespace, batch: int = 1) -> ComparisonSpec:
    if args.quick:
        return ComparisonSpec(
            batch_size=batch,
            threads=args.threads,
            min_pairs=20,
            min_seconds=min(args.seconds, 0.5),
            max_seconds=4.0,
        )
    return ComparisonSpec(
        batch_size=batch,
        threads=args.threads,
        min_pairs=30,
        min_seconds=args.seconds,
        max_seconds=max(8 * args.seconds, 8.0),
    )


def zoo_case(name: str, args: argparse.Namespace) -> Case:
    """A zoo model with no data: built-in samples at the inputs its package feeds it."""
    found = zoo_judges.zoo_case(name, FOLDER / "zoo", quick=args.quick)
    flags = found.inputs.flags() or "the model's own sizes"
    return Case(
        name,
        found.path,
        None,
        f"no data: built-in samples at {flags} ({found.kind})",
        _timing(args),
        builtin=True,
        inputs={"shapes": found.inputs.shapes, "values": found.inputs.values},
        right_task=found.right_task,
        samples=16 if args.quick else 32,
    )


def _torch_run(args: argparse.Namespace, code: list[str]) -> str:
    """Run `code` with the interpreter that has torch; its stdout's last line."""
    if not Path(args.torch_python).exists():
        raise FileNotFoundError(f"{args.torch_python} (an interpreter with torch) is missing")
    done = subprocess.run([args.torch_python, *code], capture_output=True, text=True, check=True)
    return (done.stdout.strip().splitlines() or [""])[-1]


def recognizer(args: argparse.Namespace) -> Case:
    path, npz, labels = ocr_data.rapidocr_rec(FOLDER, args.lines)
    data = NpzDataset(npz, inspect_model(path).inputs, batch_size=8)
    note = f"{len(data)} rendered text lines 48x320 with their strings as labels"
    return Case("recognizer", path, data, note, _timing(args), labels_file=labels)


def detector(args: argparse.Namespace) -> Case:
    size = args.page_size
    path, npz, _ = reference_models.rapidocr_det(FOLDER, size, args.pages)
    data = NpzDataset(npz, inspect_model(path).inputs, batch_size=1)
    note = f"{len(data)} rendered text pages {size}x{size}, no labels (agreement with FP32)"
    return Case("detector", path, data, note, _timing(args))


def classifier(args: argparse.Namespace) -> Case:
    path, npz, labels = (
        FOLDER / f"digits-cnn{end}" for end in (".onnx", "-test.npz", "-labels.npy")
    )
    if not (path.exists() and npz.exists() and labels.exists()):
        _torch_run(args, ["-c", DIGITS, str(REPO / "bench"), str(FOLDER)])
    data = NpzDataset(npz, inspect_model(path).inputs, batch_size=50)
    note = f"{len(data)} held-out scikit-learn digits (32x32) with labels; timed at batch 32"
    return Case(
        "classifier",
        path,
        data,
        note,
        _timing(args, batch=32),
        labels_file=labels,
        budgets={"top1_drop": 0.01},
    )


def minilm(args: argparse.Namespace) -> Case:
    folder = FOLDER / "minilm"
    path = folder / "minilm_opset18.onnx"
    if not path.exists():
        path = Path(
            _torch_run(args, [str(REPO / "bench" / "zoo_torch.py"), "minilm_opset18", str(folder)])
        )
    pairs = pairs_data.PAIRS[: args.pairs]
    npz = folder / f"pairs-{len(pairs)}.npz"
    if not npz.exists():
        sentences = [sentence for pair in pairs for sentence in pair]
        pairs_data.tokenize(args.torch_python, sentences, npz)
    data = NpzDataset(npz, inspect_model(path).inputs, batch_size=8)
    tokens = np.load(npz)["input_ids"].shape[1]
    unit = pairs_data.embeddings(path, data)
    partners = pairs_data.nearest(unit)
    found = sum(int(partners[i] == i ^ 1) for i in range(len(partners)))
    ranked = -np.sort(-pairs_data.similarities(unit), axis=1)
    note = (
        f"{len(pairs)} paraphrase pairs ({len(data)} sentences, padded to {tokens} tokens); "
        f"FP32's nearest neighbour is the paraphrase for {found} of {len(partners)}, median "
        f"similarity of the nearest {np.median(ranked[:, 0]):.2f}, of the 10th "
        f"{np.median(ranked[:, 9]):.2f}"
    )
    return Case(
        "minilm",
        path,
        data,
        note,
        _timing(args),
        output=pairs_data.EMBEDDING,
        extra=pair_shift,
        extra_label="pair similarity, largest change; nearest neighbour kept; lost top-10 neighbour, FP32 similarity",
    )


BUILDERS: dict[str, Callable[[argparse.Namespace], Case]] = {
    "recognizer": recognizer,
    "detector": detector,
    "classifier": classifier,
    "minilm": minilm,
}


def builder(name: str) -> Callable[[argparse.Namespace], Case]:
    """The case's builder: one of BUILDERS, else a zoo model's (bench/zoo_judges.py)."""
    if name in BUILDERS:
        return BUILDERS[name]
    if name in zoo_judges.RIGHT_TASKS:
        return lambda args: zoo_case(name, args)
    valid = ", ".join([*BUILDERS, *zoo_judges.RIGHT_TASKS])
    raise SystemExit(f"--models: no case {name!r}; the cases: {valid}")


def pair_shift(case: Case, variant: VariantResult) -> str:
    """The largest change of a pair's similarity, variant against FP32 (paraphrases and not),
    how many sentences keep FP32's nearest neighbour (the paraphrase), and how similar (in
    FP32) the closest top-10 neighbour the variant lost was."""
    reference = pairs_data.embeddings(case.path, case.data)
    precision = variant.recipe.precision or "fp32"
    mine = pairs_data.embeddings(Path(variant.path or ""), case.data, variant.backend, precision)
    shift = np.abs(pairs_data.pair_similarities(mine) - pairs_data.pair_similarities(reference))
    kept = int((pairs_data.nearest(mine) == pairs_data.nearest(reference)).sum())
    lost = pairs_data.lost_neighbours(reference, mine)
    return f"{shift.max():.4f}; {kept}/{len(mine)}; {lost:.3f}"


# --------------------------------------------------------------------------- the run


@contextlib.contextmanager
def quiet():
    """The quantizers log and print progress bars; keep the tables readable."""
    loggers = [logging.getLogger(), logging.getLogger("nncf")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def run_optimize(case: Case, recipes: list[str]) -> OptimizeReport:
    spec = OptimizeSpec(
        recipes=recipes,
        target_backend="any",
        budgets=case.budgets,
        comparison=case.comparison,
        accuracy_output=case.output,
    )
    if case.data is None:  # a zoo model: built-in samples at the inputs its package feeds
        spec = spec.model_copy(update={**case.inputs, "accuracy_samples": case.samples})
    elif case.builtin:  # as a user without data: built-in samples at the data's sizes
        spec = builtin_check.builtin_spec(case, spec)
    with quiet():
        return optimize(
            case.path,
            spec,
            out_dir=FOLDER / "runs" / case.name,
            data=None if case.builtin else case.data,
            labels_file=None if case.builtin else case.labels_file,
        )


def cosine_ok(variant: VariantResult) -> bool:
    acc = variant.accuracy
    return bool(acc and acc.samples and not acc.nan_or_inf and acc.mean_cosine >= COSINE_LIMIT)


def speed(variant: VariantResult | None) -> tuple[float, float, float]:
    """Speedup over FP32 on ORT and its 95 % interval; (1, 1, 1) for keeping the original."""
    if variant is None or not variant.ratio:
        return 1.0, 1.0, 1.0
    return 1.0 / variant.ratio, 1.0 / (variant.ratio_high or 0), 1.0 / (variant.ratio_low or 0)


def speed_text(variant: VariantResult | None) -> str:
    value, low, high = speed(variant)
    return f"{value:.2f}x [{low:.2f}, {high:.2f}]"


def label(variant: VariantResult | None) -> str:
    return "FP32 on ORT (kept)" if variant is None else variant.recipe.name


def metric_text(variant: VariantResult, task: str | None) -> str:
    metrics = variant.accuracy.task_metrics if variant.accuracy else {}
    names = [n for n in SHOWN.get(task or "", tuple(metrics)) if n in metrics]
    return ", ".join(f"{name} {metrics[name]:.4f}" for name in names) or "-"


def variant_rows(
    case: Case, report: OptimizeReport, autos: set[str], pick: VariantResult | None
) -> list[str]:
    extra = f" {case.extra_label} |" if case.extra else ""
    lines = [
        f"| variant | role | mean cosine (min) | cosine >= {COSINE_LIMIT} | task metrics "
        f"| task budget | speedup [95 % CI] |{extra}",
        "| --- | --- | --- | --- | --- | --- | --- |"
        + (" --- |" * (case.extra_label.count("|") + 1) if case.extra else ""),
    ]
    for v in report.variants:
        role = " + ".join(
            r
            for r, on in (("Auto", v.recipe.name in autos), ("anchor", v.recipe.name in ANCHORS))
            if on
        )
        name = f"**{v.recipe.name}** (Auto's pick)" if v is pick else v.recipe.name
        if v.status == "failed" or v.accuracy is None:
            error = v.error.message if v.error else "no accuracy"
            lines.append(f"| {name} | {role} | failed: {' '.join(error.split())[:160]} |")
            continue
        acc = v.accuracy
        more = f" {case.extra(case, v)} |" if case.extra else ""
        lines.append(
            f"| {name} | {role} | {acc.mean_cosine:.4f} ({acc.min_cosine:.4f}) | "
            f"{'yes' if cosine_ok(v) else 'no'} | {metric_text(v, report.task)} | "
            f"{'yes' if v.within_budget else 'no'} | {speed_text(v)} |{more}"
        )
    return lines


def cosine_pick(report: OptimizeReport, autos: set[str]) -> VariantResult | None:
    """What Auto would pick among its candidates if a cosine budget judged them."""
    judged = [
        v.model_copy(update={"within_budget": cosine_ok(v)})
        for v in report.made
        if v.recipe.name in autos and v.accuracy
    ]
    found = choose(judged)
    return next((v for v in report.made if found and v.recipe.name == found.recipe.name), None)


def picks_line(report: OptimizeReport, autos: set[str], pick: VariantResult | None) -> str:
    """Auto's pick under the task budget and under a cosine budget, each judged by the other."""
    other = cosine_pick(report, autos)
    if label(other) == label(pick):
        return f"both budgets pick {label(pick)} {speed_text(pick)}"
    by_task = "cosine ok" if pick is None or cosine_ok(pick) else "cosine REJECTS it"
    by_cosine = "task ok" if other is None or other.within_budget else "task budget REJECTS it"
    return (
        f"task budget picks {label(pick)} {speed_text(pick)} ({by_task}); a cosine budget "
        f"would pick {label(other)} {speed_text(other)} ({by_cosine})"
    )


def partings(report: OptimizeReport, autos: set[str], pick: VariantResult | None) -> list[str]:
    """Where the cosine budget and the task budget part, and the pick each would make."""
    made = [v for v in report.made if v.accuracy]
    cosine_only = [v.recipe.name for v in made if cosine_ok(v) and not v.within_budget]
    task_only = [v.recipe.name for v in made if v.within_budget and not cosine_ok(v)]
    lines = [
        f"- cosine accepts, task rejects: {', '.join(cosine_only) or 'none'}",
        f"- task accepts, cosine rejects: {', '.join(task_only) or 'none'}",
        f"- Auto's pick: {picks_line(report, autos, pick)}",
    ]
    over = [v for v in made if not v.within_budget and v.accuracy.worst]
    if over:
        lines.append("- the worst sample of each variant over the task budget:")
    for v in over:
        worst = v.accuracy.worst[0]
        lines.append(
            f"  - {v.recipe.name}, sample {worst.sample}: original {worst.reference!r}, "
            f"variant {worst.candidate!r}"
        )
    return lines


def duel(case: Case, anchor: VariantResult, pick: VariantResult) -> Comparison:
    """Auto's pick (B) against the anchor (A), interleaved, each on its own backend."""
    spec = report_spec(case).model_copy(
        update={
            "backend": anchor.backend,
            "candidate_backend": pick.backend,
            "precision": anchor.recipe.precision or "fp32",
            "candidate_precision": pick.recipe.precision or "fp32",
        }
    )
    return compare_models(Path(anchor.path or ""), Path(pick.path or ""), spec)


def report_spec(case: Case) -> ComparisonSpec:
    """The timing the run used: the case's, at the data's sample sizes (as optimize does), or
    at the zoo's inputs for a case without data."""
    if case.data is None:
        return case.comparison.model_copy(update=case.inputs)
    info = inspect_model(case.path)
    dims = sample_dims(info.inputs, next(iter(case.data.batches())))
    return case.comparison.model_copy(update={"dims": dims})


def best_anchor(report: OptimizeReport) -> VariantResult | None:
    """The fastest anchor within the task budget (by its speedup vs FP32 on ORT)."""
    anchors = [
        v
        for v in report.variants
        if v.recipe.name in ANCHORS and v.status == "made" and v.within_budget and v.ratio
    ]
    return max(anchors, key=lambda v: speed(v)[0], default=None)


def in_budget(pick: VariantResult | None) -> bool:
    return pick is None or (pick.within_budget and not pick.calibrated_on_random)


def against_anchors(case: Case, report: OptimizeReport, pick: VariantResult | None) -> str:
    """Auto's pick against the fastest in-budget anchor, and whether the target holds."""
    best = best_anchor(report)
    auto = f"Auto's pick {label(pick)} {speed_text(pick)}"
    if not in_budget(pick):
        assert pick is not None
        return f"{auto}: OUTSIDE the budget ({pick.budget_note}), target MISSED"
    if best is None:
        return f"{auto}; no anchor is within the task budget"
    ratio = speed(pick)[0] / speed(best)[0]
    line = (
        f"{auto}; fastest in-budget anchor {ANCHORS[best.recipe.name]} ({best.recipe.name}) "
        f"{speed_text(best)}; ratio {ratio:.2f}"
    )
    if pick is not None and pick.recipe.name == best.recipe.name:
        return f"{line} (the same variant: a tie)"
    if pick is None:  # Auto kept FP32: the anchor's own comparison with it is the head to head
        word = {FASTER: SLOWER, SLOWER: FASTER}.get(best.verdict or "", "tie")
    else:
        head = duel(case, best, pick)
        word = {NO_DIFFERENCE: "tie"}.get(head.verdict, head.verdict)
        line += (
            f"; head to head {pick.recipe.name}/{best.recipe.name} latency {head.ratio:.3f} "
            f"[{head.low:.3f}, {head.high:.3f}]"
        )
    met = ratio >= TARGET or word in ("tie", "faster")
    return f"{line}: {word}, target {'met' if met else 'MISSED'}"


def summary_row(
    case: Case, report: OptimizeReport, pick: VariantResult | None, machine: ContentionMonitor
) -> zoo_judges.Row:
    """The model's line of the summary table (bench/zoo_judges.py)."""
    load = machine.report
    best = best_anchor(report)
    value, low, high = speed(pick)
    return zoo_judges.Row(
        model=case.name,
        task=report.task,
        right_task=case.right_task,
        confidence=report.task_confidence,
        pick=label(pick),
        pick_speedup=value,
        pick_interval=(low, high),
        anchor=None if best is None else best.recipe.name,
        anchor_speedup=None if best is None else speed(best)[0],
        anchor_interval=None if best is None else speed(best)[1:],
        in_budget=in_budget(pick),
        other_cores=load.other_cores,
        steal=load.steal_share,
        contended=load.contended,
        seconds=load.wall_s,
        note=report.said(),
    )


def run_case(case: Case) -> tuple[list[str], zoo_judges.Row]:
    t0 = time.perf_counter()
    machine = ContentionMonitor()
    machine.start()
    usable = available_backends()
    recipes = ["auto", "int8_dynamic", "int8_static"]
    recipes += ["int8_nncf"] if "openvino" in usable else []
    recipes += BF16_ANCHORS if "openvino" in usable and native_float("bf16").native else []
    autos = {
        r.name
        for r in resolve_recipes(
            ["auto"], inspect_model(case.path), target_backend="any", backends=usable
        )
    }
    report = run_optimize(case, recipes)
    machine.stop()
    pick = choose([v for v in report.variants if v.recipe.name in autos])
    budget = ", ".join(f"{k} {v:g}" for k, v in report.task_budget.items()) or "cosine/top-1"
    on_data = case.builtin and case.data is not None
    data = f"{report.data}; then each variant on {case.data_note}" if on_data else None
    task = f"{report.task} ({report.task_confidence or 'set'})" if report.task else "none"
    lines = [
        f"### {case.name}: {case.path.name}",
        "",
        f"data: {data or case.data_note}. Task: {task}: {report.task_reason}; task budget: "
        f"{budget}; cosine on `{_judged(report)}`. Speedups vs FP32 on ONNX Runtime, "
        f"batch {case.comparison.batch_size}, {case.comparison.threads} thread(s).",
        "",
        *variant_rows(case, report, autos, pick),
        "",
        *partings(report, autos, pick),
    ]
    missing = [name for name in ANCHORS if name not in {v.recipe.name for v in report.variants}]
    if missing:
        lines.append(f"- anchors not run here: {', '.join(missing)}")
    text = against_anchors(case, report, pick)
    held = [f"{case.name}: {builtin_check.pick_line(case, pick)}"] if on_data else []
    lines += ["", f"**{case.name}: {text}**", *held, "", f"({time.perf_counter() - t0:.0f} s)"]
    print("\n".join(lines), flush=True)
    said = [f"{case.name}: {text}", f"{case.name}: {picks_line(report, autos, pick)}", *held]
    return said, summary_row(case, report, pick, machine)


def _judged(report: OptimizeReport) -> str:
    return next((v.accuracy.output for v in report.variants if v.accuracy), "?")


def _budgets(values: list[str]) -> dict[str, dict[str, float]]:
    """--budget MODEL:METRIC=LIMIT, repeatable, by model."""
    found: dict[str, dict[str, float]] = {}
    for value in values:
        model, _, rest = value.partition(":")
        metric, _, limit = rest.partition("=")
        known = (*MODELS, *zoo_judges.RIGHT_TASKS)
        if model not in known or not metric or not limit:
            raise SystemExit(f"--budget {value!r}: use MODEL:METRIC=LIMIT, MODEL in {known}")
        found.setdefault(model, {})[metric] = float(limit)
    return found


def header() -> list[str]:
    import nncf
    import onnxruntime
    import openvino

    flags = isa_flags()
    native = native_float("bf16", flags)
    bf16 = (
        f"BF16: {native.reason}; anchors {', '.join(f'{n}@openvino' for n in BF16_ANCHORS)} "
        "timed in the same run"
        if native.native
        else f"BF16: skipped ({native.reason})"
    )
    return [
        f"{date.today()}, ONNX Runtime {onnxruntime.__version__}, OpenVINO "
        f"{openvino.__version__.split('-')[0]}, NNCF {nncf.__version__}, "
        f"{len(os.sched_getaffinity(0))} cores (load average {os.getloadavg()[0]:.1f}); CPU "
        f"flags (optistudio): {' '.join(flags)}",
        bf16,
    ]


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated subset")
    parser.add_argument("--zoo", action="store_true", help="the zoo's real models issue 30 names")
    parser.add_argument("--seconds", type=float, default=1.0, help="least timed s per variant")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads for timing")
    parser.add_argument("--lines", type=int, default=48, help="rendered text lines")
    parser.add_argument("--pages", type=int, default=12, help="rendered pages")
    parser.add_argument("--page-size", type=int, default=320, help="page side, a multiple of 32")
    parser.add_argument(
        "--pairs", type=int, default=16, help=f"sentence pairs (<= {len(pairs_data.PAIRS)})"
    )
    parser.add_argument("--budget", action="append", default=[], help="MODEL:METRIC=LIMIT")
    parser.add_argument("--torch-python", default="/work/zoo-venv/bin/python")
    parser.add_argument(
        "--builtin", action="store_true", help="no data for the runs: built-in samples"
    )
    parser.add_argument("--quick", action="store_true", help="bounded timings, 16 samples")
    parser.add_argument("--json", action="store_true", help="the summary as JSON on stdout")
    args = parser.parse_args(argv)
    if args.zoo and args.models == ",".join(MODELS):
        args.models = ",".join(zoo_judges.ISSUE_CASES)
    return args


def build(name: str, args: argparse.Namespace, budgets: dict[str, dict[str, float]]) -> Case:
    case = builder(name)(args)
    case.right_task = case.right_task or RIGHT_TASKS.get(name)
    if name in budgets:
        case.budgets = budgets[name]
    if args.builtin and case.data is not None:
        builtin_check.with_builtin(case)
    return case


def run_all(args: argparse.Namespace) -> tuple[list[str], list[zoo_judges.Row]]:
    """Every case named: the lines of the summary and the rows of its table."""
    budgets = _budgets(args.budget)
    summary: list[str] = []
    rows: list[zoo_judges.Row] = []
    for name in [n.strip() for n in args.models.split(",") if n.strip()]:
        try:
            case = build(name, args, budgets)
        except (FileNotFoundError, subprocess.CalledProcessError, RuntimeError) as exc:
            line = f"{name}: skipped ({' '.join(str(exc).split())[:300]})"
            print(f"\n{line}", flush=True)
            summary.append(line)
            continue
        print(flush=True)
        with contextlib.chdir(FOLDER):  # nothing a quantizer writes lands in the checkout
            said, row = run_case(case)
        summary += said
        rows.append(row)
    return summary, rows


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    t0 = time.perf_counter()
    stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr if args.json else stdout):
        print("\n".join(header()), flush=True)
        FOLDER.mkdir(parents=True, exist_ok=True)
        summary, rows = run_all(args)
        print("\nsummary")
        for line in summary:
            print(f"  {line}")
        print("", *zoo_judges.table(rows), "", sep="\n")
        end = f"total {time.perf_counter() - t0:.0f} s; load average {os.getloadavg()[0]:.1f}"
        print(f"{end} at the end", flush=True)
    if args.json:
        document = {"environment": header(), "rows": [row.as_json() for row in rows]}
        print(json.dumps(document, indent=2), file=stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
