"""Quantization: Optistudio Auto against the standard anchors, on real models, in one run.

For each model: the FP32 ONNX Runtime model is the baseline; the anchors run with their default
settings (ONNX Runtime `quantize_dynamic`, `quantize_static` = MinMax, QDQ, per-tensor); then
`optistudio.core.optimize.run.optimize` with recipes ["auto"]. Every candidate is checked against FP32 on the
same data (optistudio.core.numerics.accuracy) and timed against FP32 with an interleaved A/B comparison
(optistudio.core.measure.compare), so each speedup carries a 95 % interval. The anchors' static calibration gets
exactly the data Optistudio gets.

OpenVINO (when nncf and openvino are installed): the NNCF anchor is Optistudio's `int8_nncf` pass
with an empty config (= `nncf.quantize` with NNCF's defaults: preset performance, subset_size
300), calibrated on the same data, and "Auto (target openvino)" is `optimize` with recipes
["auto"] and target_backend "openvino" (its CNN candidates include int8_nncf). Both are timed on
OpenVINO against the FP32 model on OpenVINO (the runtime NNCF targets), so their speedups have
that second baseline; their accuracy is checked exactly as the other candidates'.

Target: Auto's chosen variant is within budget (mean cosine >= 0.99, top-1 drop <= 1 point) and
at least as fast as the fastest anchor within budget; overlapping intervals count as a tie.
When both exist, the two are also timed head to head (interleaved), and that comparison, with
optistudio.core.measure.compare's 2 % practical margin, decides. Auto keeping FP32 counts as 1.00x. The same rule,
on OpenVINO, gives a second verdict: Auto (target openvino)'s chosen variant vs the NNCF anchor.

Models (bench/reference_models.py, cached under data/bench-models/):
  digits    small CNN trained on scikit-learn digits (32x32), 450 held-out images + labels
  rapidocr  PP-OCRv4 text detector, rendered text pages (--ocr-size, default 320; the sample's
            nominal size is 640, smaller keeps the run short)
  resnet50  ResNet-50-shaped CNN, random weights, crops of scikit-learn's two sample photos
            (--resnet-size, default 224)
  minilm    all-MiniLM-L6-v2, 32 real sentences padded to the longest (--minilm-seq); timed
            at batch 1, sequence 128; every candidate is judged on `sentence_embedding` (the
            output a user consumes) on cosine alone, since top-1 means nothing for an
            embedding; the other models on their first output with the full budget

Run: .venv/bin/python bench/quantization.py [--models digits,rapidocr] [--seconds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import logging
import os
import shutil
import sys
import time
import warnings
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import reference_models  # noqa: E402

from optistudio.core.data.datasets import NpzDataset, load_labels  # noqa: E402
from optistudio.core.measure.compare import Comparison, ComparisonSpec, compare_models  # noqa: E402
from optistudio.core.model.intake import inspect_model  # noqa: E402
from optistudio.core.numerics.accuracy import (  # noqa: E402
    AccuracyBudget,
    AccuracyReport,
    accuracy_report,
    within_budget,
)
from optistudio.core.optimize.run import OptimizeReport, OptimizeSpec, VariantResult, optimize  # noqa: E402
from optistudio.core.passes.base import PassContext, passes  # noqa: E402

MODELS = ("digits", "rapidocr", "resnet50", "minilm")
BUDGET = AccuracyBudget(min_cosine=0.99, max_top1_drop=0.01)
# An embedding has no classes: the argmax of its last axis is one of 384 near-tied dimensions,
# so "top-1 agreement" on it measures nothing. Judged on cosine alone (None = check off).
EMBEDDING_BUDGET = AccuracyBudget(min_cosine=0.99, max_top1_drop=None)
NNCF_SKIPPED = "NNCF: skipped (nncf or openvino not installed)"
NNCF_ANCHOR = "NNCF quantize (defaults: performance, subset 300)"
RUNS = reference_models.DEFAULT_FOLDER / "quantization-runs"


@dataclass
class Case:
    """One model with its data and how it is timed."""

    name: str
    path: Path
    data: object
    data_note: str
    labels: np.ndarray | None
    comparison: ComparisonSpec
    output: str | None = None  # the output the accuracy budget judges; None = the first
    budget: AccuracyBudget = field(default_factory=lambda: BUDGET)


@dataclass
class Row:
    """One candidate's figures (speedup = 1 / (variant / FP32 latency ratio))."""

    name: str
    kind: str  # "anchor" or "auto"
    accuracy: AccuracyReport | None = None
    within: bool = False
    budget_note: str = ""
    ratio: float | None = None
    low: float | None = None
    high: float | None = None
    verdict: str = ""
    base_ms: float | None = None
    variant_ms: float | None = None
    error: str | None = None
    chosen: bool = False
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def speedup(self) -> float | None:
        return 1.0 / self.ratio if self.ratio else None

    @property
    def speedup_interval(self) -> tuple[float, float] | None:
        if not self.low or not self.high:
            return None
        return 1.0 / self.high, 1.0 / self.low


# --------------------------------------------------------------------------- cases


def _spec(args, batch: int, **shape) -> ComparisonSpec:
    return ComparisonSpec(
        batch_size=batch,
        threads=args.threads,
        min_pairs=30,
        min_seconds=args.seconds,
        max_seconds=max(4 * args.seconds, 20.0),
        **shape,
    )


def build_case(name: str, args) -> Case:
    folder = reference_models.DEFAULT_FOLDER
    if name == "digits":
        path, npz, labels_path = reference_models.digits_cnn(folder)
        info = inspect_model(path)
        data = NpzDataset(npz, info.inputs, batch_size=50)
        labels = load_labels(labels_path, samples=len(data))
        note = f"real: {len(data)} held-out digits with labels (calibration uses the same set)"
        return Case(name, path, data, note, labels, _spec(args, args.digits_batch))
    if name == "rapidocr":
        size = args.ocr_size
        path, npz, _ = reference_models.rapidocr_det(folder, size, args.samples)
        data = NpzDataset(npz, inspect_model(path).inputs, batch_size=1)
        note = f"{len(data)} rendered text pages {size}x{size} (no real set; not task accuracy)"
        return Case(name, path, data, note, None, _spec(args, 1, shapes={"x": [1, 3, size, size]}))
    if name == "resnet50":
        size = args.resnet_size
        path, npz, _ = reference_models.resnet50_shaped(folder, size, args.samples)
        data = NpzDataset(npz, inspect_model(path).inputs, batch_size=1)
        note = (
            f"{len(data)} crops {size}x{size} of scikit-learn's 2 sample photos; random "
            "weights, so accuracy = agreement with FP32"
        )
        return Case(name, path, data, note, None, _spec(args, 1))
    if name == "minilm":
        path, npz, _ = reference_models.minilm(folder, args.minilm_seq, args.samples)
        data = NpzDataset(npz, inspect_model(path).inputs, batch_size=1)
        tokens = np.load(npz)["input_ids"].shape[1]
        note = (
            f"{len(data)} real sentences padded to {tokens} tokens "
            f"({'the longest' if not args.minilm_seq else 'fixed'}); agreement with FP32 "
            "on sentence_embedding"
        )
        spec = _spec(args, 1, dims={"sequence": 128})
        return Case(
            name,
            path,
            data,
            note,
            None,
            spec,
            output="sentence_embedding",
            budget=EMBEDDING_BUDGET,
        )
    raise SystemExit(f"unknown model {name!r}; choose from {', '.join(MODELS)}")


# --------------------------------------------------------------------------- anchors


@contextlib.contextmanager
def _quiet():
    """ORT's quantizer logs a 'please pre-process' warning on every call; keep the output short."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


class _Reader:
    """The calibration source as ONNX Runtime's CalibrationDataReader (batches in order)."""

    def __init__(self, source) -> None:
        self._batches = iter(source.batches())

    def get_next(self):
        return next(self._batches, None)


def _ort_dynamic(model: Path, out: Path, case: Case) -> Path:
    from onnxruntime.quantization import quantize_dynamic

    with _quiet():
        quantize_dynamic(model, out)
    return out


def _ort_static(model: Path, out: Path, case: Case) -> Path:
    from onnxruntime.quantization import CalibrationDataReader, quantize_static

    reader = type("Reader", (_Reader, CalibrationDataReader), {})(case.data)
    with _quiet(), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # zero-width ranges (ORT's own)
        quantize_static(model, out, reader)
    return out


def _nncf(model: Path, out: Path, case: Case) -> Path:
    """Optistudio's int8_nncf pass with an empty config: nncf.quantize with NNCF's defaults."""
    os.environ.setdefault("NNCF_CI", "1")  # no telemetry (the pass sets it too)
    context = PassContext(
        work_dir=out.parent / "nncf-work", target_backend="openvino", calibration=case.data
    )
    context.work_dir.mkdir(parents=True, exist_ok=True)
    with _quiet(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = passes.get("int8_nncf").run(model, out, {}, context)
    return report.output


def _nncf_available() -> bool:
    return bool(importlib.util.find_spec("nncf") and importlib.util.find_spec("openvino"))


def _openvino(spec: ComparisonSpec) -> ComparisonSpec:
    return spec.model_copy(update={"backend": "openvino"})


ANCHORS = (
    ("ORT quantize_dynamic", _ort_dynamic),
    ("ORT quantize_static (MinMax, QDQ, per-tensor)", _ort_static),
)


def run_anchor(
    name: str, make, case: Case, folder: Path, comparison: ComparisonSpec | None = None
) -> Row:
    row = Row(name, "anchor")
    t0 = time.perf_counter()
    out = folder / (name.split()[1] + ".onnx")
    if make is _nncf:
        out = folder / "nncf.onnx"
    try:
        out = make(case.path, out, case)
        timing = comparison or case.comparison
        row.accuracy = accuracy_report(  # on the backend it is timed on (NNCF: OpenVINO)
            case.path,
            out,
            case.data,
            labels=case.labels,
            output=case.output,
            candidate_backend=timing.backend,
        )
        row.within, row.budget_note = within_budget(row.accuracy, case.budget)
        _fill_timing(row, compare_models(case.path, out, timing))
    except Exception as exc:  # an anchor that cannot handle the model is a result too
        row.error = f"{type(exc).__name__}: {exc}"
    row.extra["path"] = out
    row.seconds = time.perf_counter() - t0
    return row


def _fill_timing(row: Row, comparison: Comparison) -> None:
    row.ratio, row.low, row.high = comparison.ratio, comparison.low, comparison.high
    row.verdict = comparison.verdict
    row.base_ms, row.variant_ms = comparison.a_p50_ms, comparison.b_p50_ms


def auto_rows(report: OptimizeReport, prefix: str = "Auto") -> list[Row]:
    rows = []
    for variant in report.variants:
        rows.append(_auto_row(variant, chosen=variant.recipe.name == report.chosen, prefix=prefix))
    return rows


def _auto_row(v: VariantResult, *, chosen: bool, prefix: str = "Auto") -> Row:
    row = Row(
        f"{prefix}: {v.recipe.name}",
        "auto",
        accuracy=v.accuracy,
        within=v.within_budget,
        budget_note=v.budget_note,
        ratio=v.ratio,
        low=v.ratio_low,
        high=v.ratio_high,
        verdict=v.verdict,
        base_ms=v.original_p50_ms,
        variant_ms=v.variant_p50_ms,
        error=v.error,
        chosen=chosen,
    )
    row.extra["precision"] = v.precision
    row.extra["backend"] = v.backend
    row.extra["warnings"] = [f"{step.step}: {w}" for step in v.steps for w in step.warnings]
    row.extra["path"] = Path(v.path) if v.path else None
    return row


# --------------------------------------------------------------------------- verdict


def best_anchor(anchors: list[Row]) -> Row | None:
    """The fastest anchor (median speedup) among those within budget."""
    good = [a for a in anchors if a.error is None and a.within and a.speedup]
    return max(good, key=lambda a: a.speedup, default=None)


def target_line(
    auto: Row | None, anchors: list[Row], duel: Comparison | None = None, *, kept: str = "FP32"
) -> str:
    """'target met' / 'target MISSED' with the reason.

    Each candidate was timed against FP32 in its own comparison; intervals that overlap are a
    tie. When Auto chose a variant and an anchor is within budget, the two were also timed
    head to head (interleaved, duel = Auto / anchor): that paired comparison, with core's 2 %
    practical margin, decides, because it is not exposed to drift between separate runs.
    """
    if auto is None:  # Auto kept the original: 1.0x, exact
        label, speed, interval = f"Auto kept {kept}", 1.0, (1.0, 1.0)
    else:
        label, speed, interval = auto.name, auto.speedup, auto.speedup_interval
        if not auto.within:
            return f"target MISSED: Auto's {auto.name} is over budget ({auto.budget_note})"
    best = best_anchor(anchors)
    if best is None:
        return f"target met: {label} {speed:.2f}x within budget; no anchor is within budget"
    b_low, b_high = best.speedup_interval
    what = (
        f"{label} {speed:.2f}x [{interval[0]:.2f}, {interval[1]:.2f}] vs fastest in-budget "
        f"anchor {best.name} {best.speedup:.2f}x [{b_low:.2f}, {b_high:.2f}]"
    )
    if interval[0] > b_high:
        separate = "faster"
    elif interval[1] < b_low:
        separate = "slower"
    else:
        separate = "tie"
    if duel is None:
        met = separate != "slower"
        return f"target {'met' if met else 'MISSED'} ({separate}, separate intervals): {what}"
    head = (
        f"head to head Auto/anchor latency {duel.ratio:.3f} [{duel.low:.3f}, "
        f"{duel.high:.3f}]: {duel.verdict}"
    )
    word = {"faster": "faster", "slower": "slower"}.get(duel.verdict, "tie")
    met = duel.verdict != "slower"
    return (
        f"target {'met' if met else 'MISSED'} ({word}; {head}; separate intervals: "
        f"{separate}): {what}"
    )


# --------------------------------------------------------------------------- output


def _accuracy_text(row: Row) -> str:
    acc = row.accuracy
    if acc is None:
        return "-"
    if acc.top1_drop is not None:
        return (
            f"top-1 {acc.top1_accuracy_candidate:.2%} (drop {acc.top1_drop * 100:+.2f} pt), "
            f"cos {acc.mean_cosine:.4f}"
        )
    text = f"cos {acc.mean_cosine:.5f} (min {acc.min_cosine:.4f})"
    if acc.top1_agreement is not None:
        text += f", top-1 agree {acc.top1_agreement:.1%}"
    return text


def table(case: Case, rows: list[Row], baseline: str = "FP32 on ORT") -> list[str]:
    bases = [r.base_ms for r in rows if r.base_ms]
    base = float(np.median(bases)) if bases else None
    judged = f" (on `{case.output}`)" if case.output else ""
    if case.budget.max_top1_drop is None:
        judged = judged[:-1] + "; budget: cosine only)" if judged else " (budget: cosine only)"
    lines = [
        f"| candidate | speedup [95 % CI] | p50 ms | accuracy vs FP32{judged} | within budget |",
        "| --- | --- | --- | --- | --- |",
    ]
    ref_top1 = next(
        (
            r.accuracy.top1_accuracy_reference
            for r in rows
            if r.accuracy and r.accuracy.top1_accuracy_reference is not None
        ),
        None,
    )
    base_acc = f"top-1 {ref_top1:.2%}" if ref_top1 is not None else "reference"
    lines.append(
        f"| {baseline} (baseline; median p50) | 1.00x | {base or 0:.2f} | {base_acc} | - |"
    )
    for row in rows:
        name = f"**{row.name}** (chosen)" if row.chosen else row.name
        if row.error:
            error = " ".join(row.error.split())
            error = error if len(error) <= 200 else error[:197] + "..."
            lines.append(f"| {name} | failed: {error.replace('|', '/')} | | | |")
            continue
        low, high = row.speedup_interval or (0.0, 0.0)
        speed = f"{row.speedup:.2f}x [{low:.2f}, {high:.2f}]" if row.speedup else "-"
        lines.append(
            f"| {name} | {speed} | {row.variant_ms or 0:.2f} | {_accuracy_text(row)} | "
            f"{'yes' if row.within else 'no'} |"
        )
    return lines


def run_case(name: str, args) -> tuple[list[str], str]:
    t0 = time.perf_counter()
    case = build_case(name, args)
    folder = RUNS / name
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "anchors").mkdir(parents=True)
    spec = case.comparison
    print(
        f"\n## {name}: {case.path.name}\ndata: {case.data_note}\n"
        f"timing: batch {spec.batch_size}, threads {spec.threads or 'default'}, "
        f">= {spec.min_pairs} pairs and {spec.min_seconds:g} s per comparison",
        flush=True,
    )
    rows = []
    for anchor, make in ANCHORS:
        rows.append(run_anchor(anchor, make, case, folder / "anchors"))
        print(f"  {anchor}: {rows[-1].seconds:.0f} s", flush=True)
    nncf = _nncf_available()
    ov_rows: list[Row] = []
    if nncf:
        ov_rows.append(run_anchor(NNCF_ANCHOR, _nncf, case, folder / "anchors", _openvino(spec)))
        print(f"  {NNCF_ANCHOR} (timed on OpenVINO): {ov_rows[-1].seconds:.0f} s", flush=True)
    t1 = time.perf_counter()
    report = _auto(case, folder / "auto", "onnxruntime")
    autos = auto_rows(report)
    print(
        f"  Auto ({', '.join(v.recipe.name for v in report.variants)}): "
        f"{time.perf_counter() - t1:.0f} s",
        flush=True,
    )
    ov_autos: list[Row] = []
    if nncf:
        t1 = time.perf_counter()
        ov_report = _auto(case, folder / "auto-openvino", "openvino")
        ov_autos = auto_rows(ov_report, prefix="Auto (target openvino)")
        print(
            f"  Auto, target openvino ({', '.join(v.recipe.name for v in ov_report.variants)}): "
            f"{time.perf_counter() - t1:.0f} s",
            flush=True,
        )
    any_rows, any_autos, any_verdict = (
        _any_backend(case, folder, rows, ov_rows)
        if nncf
        else (
            [],
            [],
            None,
        )
    )
    judged = {
        r.accuracy.output for r in rows + autos + ov_rows + ov_autos + any_autos if r.accuracy
    }
    if case.output and judged - {case.output}:  # the figures must be on the output named
        raise RuntimeError(f"{name}: accuracy judged on {judged}, not {case.output!r}")
    chosen = next((r for r in autos if r.chosen), None)
    best, duel = best_anchor(rows), None
    if chosen is not None and best is not None:
        duel = compare_models(best.extra["path"], chosen.extra["path"], spec)
        print(f"  head to head {chosen.name} / {best.name}: {duel.sentence}", flush=True)
    verdict = "ORT " + target_line(chosen, rows, duel)
    ov_verdict = None
    if nncf:
        ov_chosen = next((r for r in ov_autos if r.chosen), None)
        ov_best, ov_duel = best_anchor(ov_rows), None
        if ov_chosen is not None and ov_best is not None:
            ov_duel = compare_models(
                ov_best.extra["path"], ov_chosen.extra["path"], _openvino(spec)
            )
            print(
                f"  head to head on OpenVINO {ov_chosen.name} / {ov_best.name}: {ov_duel.sentence}",
                flush=True,
            )
        ov_verdict = "OpenVINO " + target_line(ov_chosen, ov_rows, ov_duel, kept="FP32 (OpenVINO)")
    lines = ["Timed on ONNX Runtime (speedup vs FP32 on ORT):", ""]
    lines += table(case, rows + autos, "FP32 on ORT")
    if chosen is None:
        lines.append("")
        lines.append("Auto chose nothing (kept the FP32 original, 1.00x).")
    if nncf:
        lines += ["", "Timed on OpenVINO (speedup vs FP32 on OpenVINO):", ""]
        lines += table(case, ov_rows + ov_autos, "FP32 on OpenVINO")
        if not any(r.chosen for r in ov_autos):
            lines += ["", "Auto (target openvino) chose nothing (kept FP32, 1.00x)."]
        lines += [
            "",
            "Any backend (speedup vs FP32 on ORT; each candidate on its own backend):",
            "",
        ]
        lines += table(case, any_rows + any_autos, "FP32 on ORT")
        if not any(r.chosen for r in any_autos):
            lines += ["", "Auto (any backend) chose nothing (kept FP32 on ORT, 1.00x)."]
    else:
        lines += ["", NNCF_SKIPPED]
    for row in autos + ov_autos + ov_rows + any_autos:
        if row.error is None and not row.within:
            lines.append(f"- {row.name}: {row.budget_note}")
        for warning in row.extra.get("warnings", []):
            text = " ".join(warning.split())
            lines.append(f"- {row.name}, {text if len(text) <= 240 else text[:237] + '...'}")
    lines += ["", f"**{verdict}**"]
    if ov_verdict:
        lines += ["", f"**{ov_verdict}**"]
    if any_verdict:
        lines += ["", f"**{any_verdict}**"]
    lines += ["", f"({name}: {time.perf_counter() - t0:.0f} s in all; data: {case.data_note})"]
    print("\n".join(lines), flush=True)
    return lines, [verdict] + [v for v in (ov_verdict, any_verdict) if v]


def _any_backend(
    case: Case, folder: Path, rows: list[Row], ov_rows: list[Row]
) -> tuple[list[Row], list[Row], str]:
    """Auto with target 'any' against every anchor timed vs FP32 on ONNX Runtime.

    The ORT anchors already are; the NNCF anchor is re-timed: FP32 on ORT (A) against the NNCF
    model on OpenVINO (B), the deployment a user would compare. The head to head runs each
    model on its own backend.
    """
    spec = case.comparison
    anchors = list(rows)
    for ov in ov_rows:
        cross = Row(f"{ov.name} (on OpenVINO)", "anchor", accuracy=ov.accuracy, within=ov.within)
        cross.budget_note, cross.extra = ov.budget_note, dict(ov.extra, backend="openvino")
        cross.error = ov.error
        if ov.error is None:
            cross_spec = spec.model_copy(update={"candidate_backend": "openvino"})
            _fill_timing(cross, compare_models(case.path, ov.extra["path"], cross_spec))
        anchors.append(cross)
    t1 = time.perf_counter()
    report = _auto(case, folder / "auto-any", "any")
    autos = auto_rows(report, prefix="Auto (any backend)")
    print(
        f"  Auto, any backend ({', '.join(v.recipe.name for v in report.variants)}): "
        f"{time.perf_counter() - t1:.0f} s",
        flush=True,
    )
    chosen = next((r for r in autos if r.chosen), None)
    best, duel = best_anchor(anchors), None
    if chosen is not None and best is not None:
        duel_spec = spec.model_copy(
            update={
                "backend": best.extra.get("backend", "onnxruntime"),
                "candidate_backend": chosen.extra.get("backend", "onnxruntime"),
            }
        )
        duel = compare_models(best.extra["path"], chosen.extra["path"], duel_spec)
        print(f"  head to head {chosen.name} / {best.name}: {duel.sentence}", flush=True)
    verdict = "Any backend " + target_line(chosen, anchors, duel, kept="FP32 on ORT")
    return anchors, autos, verdict


def _auto(case: Case, out_dir: Path, backend: str) -> OptimizeReport:
    with _quiet(), warnings.catch_warnings():
        if backend != "onnxruntime":
            warnings.simplefilter("ignore")  # NNCF's own chatter
        return optimize(
            case.path,
            OptimizeSpec(
                recipes=["auto"],
                target_backend=backend,
                budget=case.budget,
                comparison=case.comparison,
                accuracy_output=case.output,
            ),
            out_dir=out_dir,
            data=case.data,
            labels=case.labels,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models",
        default=",".join(MODELS),
        help=f"comma-separated subset of {', '.join(MODELS)} (default: all)",
    )
    parser.add_argument(
        "--seconds", type=float, default=3.0, help="least timed seconds per comparison (default 3)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="intra-op threads for timing (default 1: the machine is shared)",
    )
    parser.add_argument(
        "--samples",
        type=int,
        default=32,
        help="samples for the models without a real test set (default 32)",
    )
    parser.add_argument("--ocr-size", type=int, default=320, help="rapidocr image side (x32)")
    parser.add_argument("--resnet-size", type=int, default=224, help="ResNet-50 image side")
    parser.add_argument("--digits-batch", type=int, default=32, help="digits timing batch")
    parser.add_argument(
        "--minilm-seq",
        type=int,
        default=0,
        help="pad the MiniLM sentences to this length (default 0: the longest)",
    )
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    import onnxruntime

    t0 = time.perf_counter()
    print(
        f"{date.today()}, ONNX Runtime {onnxruntime.__version__}, "
        f"{len(os.sched_getaffinity(0))} cores; budget: mean cosine >= {BUDGET.min_cosine}, "
        f"top-1 drop <= {BUDGET.max_top1_drop:.0%} (minilm: cosine on sentence_embedding only)"
    )
    if _nncf_available():
        import nncf
        import openvino

        print(f"NNCF {nncf.__version__}, OpenVINO {openvino.__version__.split('-')[0]}")
    else:
        print(NNCF_SKIPPED)
    verdicts = {}
    for name in names:
        # Each model runs in a scratch working directory, so that nothing a quantizer writes
        # next to itself can land in the checkout (core's int8_static already pre-processes
        # in its own work dir; this is a guard, not a workaround).
        (RUNS / "cwd").mkdir(parents=True, exist_ok=True)
        with contextlib.chdir(RUNS / "cwd"):
            _, verdicts[name] = run_case(name, args)
    print("\nsummary")
    for name, lines in verdicts.items():
        for verdict in lines:
            print(f"  {name:<9} {verdict}")
    print(f"total {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
