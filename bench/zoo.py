"""Every zoo model (bench/zoo_models.py) through every job, with the engine as a library.

For each model, the stages a user's upload goes through, called as the workers call core:

  intake     store_model with ONNX Runtime's load check (the studio's upload); a stored model
             must then load in ONNX Runtime ("stored" means "ONNX Runtime loaded it")
  free-dims  only for a model typed with --free-dims: the checked copy with the declared dims
             the shapes conflict with freed (free_dims.freed_copy, as the CLI makes it); the
             stages after it run that copy
  bench:B    run_benchmark on each backend B available on this CPU (inventory)
  optimize   optimize with the auto recipe over every available backend
  profile    diagnose, with the first INT8 variant Auto made on ONNX Runtime when there is one
  soak       a short memory soak
  batching   measure_profile, then simulate at 70 % of the profiled ceiling
  export     write_bundle of the stored model (Triton config, OpenVINO IR, manifest)

Each stage ends "ok", "said" (an OptistudioError: the engine says in a sentence what the model
lacks or why it cannot), "bug" (any other exception: a traceback, which is the engine's fault)
or "skipped" (an earlier stage refused the model; the build, when the model's wheel could not be
downloaded: bench/zoo_wheels.py; with --quick, a stage the model runs in the full sweep only).
Stages take the user's inputs of the model (shapes, dims, values) exactly as the CLI's flags
pass them. Budgets are small with --quick (the CI sweep in tests/zoo) and larger otherwise (the
table in docs/BENCHMARKS.md).

Run:  .venv/bin/python bench/zoo.py [--quick] [--only NAME ...] [--json] [--workers N]
                                   [--torch-python /work/zoo-venv/bin/python]
      .venv/bin/python bench/zoo.py --table zoo.json     (the tables of a saved --json run)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import onnxruntime as ort  # noqa: E402
from zoo_models import UserInputs, ZooModel, zoo  # noqa: E402
from zoo_wheels import WheelUnavailable  # noqa: E402

from optistudio.core.backends.inventory import hardware_inventory  # noqa: E402
from optistudio.core.backends.loadable import check_loads  # noqa: E402
from optistudio.core.backends.target import RunTarget  # noqa: E402
from optistudio.core.batching.latency_profile import measure_latency_profile  # noqa: E402
from optistudio.core.batching.settings import settings_from  # noqa: E402
from optistudio.core.batching.simulate import simulate  # noqa: E402
from optistudio.core.data.inputs import user_inputs  # noqa: E402
from optistudio.core.data.model_inputs import ModelInputs  # noqa: E402
from optistudio.core.diagnose.diagnostics import DiagnosticsSpec, diagnose  # noqa: E402
from optistudio.core.errors import OptistudioError, first_line  # noqa: E402
from optistudio.core.measure.benchmark import BenchmarkSpec, run_benchmark  # noqa: E402
from optistudio.core.measure.compare import ComparisonSpec  # noqa: E402
from optistudio.core.measure.soak import SoakSpec, soak  # noqa: E402
from optistudio.core.model.info import ModelInfo  # noqa: E402
from optistudio.core.model.intake import inspect_model, store_model  # noqa: E402
from optistudio.core.optimize.run import (  # noqa: E402
    OptimizeReport,
    OptimizeSpec,
    VariantResult,
    available_backends,
    optimize,
)
from optistudio.core.passes.free_dims import freed_copy  # noqa: E402
from optistudio.core.report.bundle import BundleSource, write_bundle  # noqa: E402

Status = Literal["ok", "said", "bug", "skipped"]
STAGES = ("intake", "bench", "optimize", "profile", "soak", "batching", "export")


@dataclass(frozen=True)
class Budgets:
    """How long each stage may take: `quick` for CI, the default for the published table."""

    quick: bool
    bench: dict[str, Any]
    comparison: dict[str, Any]
    threads: int | None
    accuracy_samples: int
    profile_runs: int
    soak_seconds: float
    soak_batches: list[int]
    batching_min_seconds: float
    batching_probe_scale: float = 1.0
    """The latency profile's serving probes at this share of their length
    (measure_latency_profile's probe_time_scale): the quick sweep checks outcomes."""


QUICK = Budgets(
    quick=True,
    bench={
        "warmup_runs": 1,
        "min_runs": 3,
        "min_seconds": 0.05,
        "max_seconds": 0.2,
        "window_seconds": 0.02,
        "stability_windows": 2,
    },
    comparison={
        "warmup_runs": 1,
        "min_pairs": 3,
        "min_seconds": 0.05,
        "max_seconds": 0.3,
        "resamples": 200,
    },
    threads=1,  # two models at once on two cores: no runtime's threads spin against the other's
    accuracy_samples=2,
    profile_runs=2,
    soak_seconds=0.3,
    soak_batches=[1, 2],
    batching_min_seconds=0.02,
    batching_probe_scale=0.15,
)
QUICK_PASS_SETTINGS = {
    "int8_nncf_ov_ac": {"time_limit_s": 6.0, "max_iterations": 4, "ranking_subset_size": 2},
    "int8_nncf_ov": {"fast_bias_correction": True},
}
"""The quick sweep's bound on NNCF's accuracy-controlled search (900 s and 30 reversions by
default, for a user's run): Auto still adds it where it would, and it either keeps the task in
a few reversions or says it could not in that time; the sweep holds its outcome, not its speed.
Likewise the careful calibration Auto adds before that search runs with NNCF's fast bias
correction in the sweep (with its exact one the sweep took 361 s against 302 s without the
offer, one run each; docs/DEVELOPMENT.md); every other option of it stays."""
FULL = Budgets(
    quick=False,
    bench={
        "warmup_runs": 3,
        "min_runs": 20,
        "min_seconds": 1.0,
        "max_seconds": 5.0,
        "window_seconds": 0.25,
    },
    comparison={"min_pairs": 20, "min_seconds": 1.0, "max_seconds": 10.0},
    threads=None,
    accuracy_samples=8,
    profile_runs=10,
    soak_seconds=3.0,
    soak_batches=[1, 2, 4, 8],
    batching_min_seconds=0.3,
)


@dataclass
class Outcome:
    """One stage of one model: its status, a one-line reason or summary, and its figures."""

    stage: str
    status: Status
    reason: str = ""
    seconds: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)
    traceback: str | None = None


@dataclass
class ModelRun:
    """Everything one model went through."""

    name: str
    kind: str
    flags: str
    ort_loads: bool | None = None
    ort_runs: bool | None = None
    ort_reason: str = ""
    outcomes: list[Outcome] = field(default_factory=list)

    def outcome(self, stage: str) -> Outcome | None:
        return next((o for o in self.outcomes if o.stage == stage), None)

    @property
    def accepted_unloadable(self) -> bool:
        """Stored by intake, yet ONNX Runtime cannot load it: what must never happen."""
        intake = self.outcome("intake")
        return bool(intake and intake.status == "ok" and self.ort_loads is False)


class _Context:
    """What the stages of one model share: its stored file, card, inputs and variants."""

    def __init__(self, model: ZooModel, folder: Path, budgets: Budgets) -> None:
        self.model, self.folder, self.budgets = model, folder, budgets
        self.source: Path | None = None
        self.path: Path | None = None
        self.info: ModelInfo | None = None
        self.report: OptimizeReport | None = None
        self.benchmarks: list[dict[str, Any]] = []

    @property
    def typed(self) -> UserInputs:
        """What the user types for this model (smaller, still real, inputs for a quick run)."""
        return (self.budgets.quick and self.model.quick_inputs) or self.model.inputs

    @property
    def inputs(self) -> dict[str, Any]:
        return self.typed.fields()


def run_stage(stage: str, work: Callable[[], tuple[str, dict[str, Any]]]) -> Outcome:
    """Run one stage: ok with its summary, said with the error's message, bug with the trace."""
    start = time.perf_counter()
    try:
        summary, detail = work()
        outcome = Outcome(stage, "ok", summary, detail=detail)
    except OptistudioError as exc:
        outcome = Outcome(stage, "said", exc.message, detail={"code": exc.code, "hint": exc.hint})
    except WheelUnavailable as exc:  # the zoo's own download, not the engine: no network
        outcome = Outcome(stage, "skipped", str(exc))
    except Exception as exc:  # the point of the zoo: anything else is a bug to report
        outcome = Outcome(
            stage,
            "bug",
            f"{type(exc).__name__}: {first_line(exc)}",
            traceback=traceback.format_exc(),
        )
    outcome.seconds = round(time.perf_counter() - start, 2)
    return outcome


def run_model(model: ZooModel, folder: Path, budgets: Budgets = QUICK) -> ModelRun:
    """Build the model into `folder` and put it through every stage."""
    context = _Context(model, folder, budgets)
    run = ModelRun(model.name, model.kind, context.typed.flags())
    build = run_stage("build", lambda: _build(context))
    if build.status != "ok":
        run.outcomes.append(build)
        return run
    run.ort_loads, run.ort_runs, run.ort_reason = _ort_runs(context)
    run.outcomes.append(run_stage("intake", lambda: _intake(context)))
    if context.typed.free_dims and context.path is not None:
        run.outcomes.append(run_stage("free-dims", lambda: _free_dims(context)))
    for stage, work in _stages(context):
        if context.path is None:
            outcome = Outcome(stage, "skipped")
        elif budgets.quick and stage.split(":")[0] in model.full_only:
            outcome = Outcome(stage, "skipped", "run in the full sweep only (ZooModel.full_only)")
        else:
            outcome = run_stage(stage, work)
        run.outcomes.append(outcome)
    return run


def _stages(context: _Context) -> list[tuple[str, Callable[[], tuple[str, dict[str, Any]]]]]:
    benches = [
        (f"bench:{backend}", _bench_on(context, backend)) for backend in available_backends()
    ]
    return [
        *benches,
        ("optimize", lambda: _optimize(context)),
        ("profile", lambda: _profile(context)),
        ("soak", lambda: _soak(context)),
        ("batching", lambda: _batching(context)),
        ("export", lambda: _export(context)),
    ]


def _build(context: _Context) -> tuple[str, dict[str, Any]]:
    context.source = context.model.build(context.folder / "source")
    return context.source.name, {}


def _ort_runs(context: _Context) -> tuple[bool, bool, str]:
    """Ground truth, apart from intake: whether ONNX Runtime loads the built file, whether it
    runs it on the user's inputs, and why not."""
    assert context.source is not None
    try:
        session = ort.InferenceSession(str(context.source), providers=["CPUExecutionProvider"])
    except Exception as exc:  # ONNX Runtime's own exception types
        return False, False, f"{type(exc).__name__}: {first_line(exc)}"
    try:
        source = context.source
        if context.typed.free_dims:  # what the user runs: the copy --free-dims makes
            source, _ = freed_copy(
                source, shapes=context.typed.shapes, folder=context.folder / "ort"
            )
            session = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"])
        info = inspect_model(source)
        feeds, _, _ = user_inputs(info.inputs, batch_size=1, inputs_file=None, **context.inputs)
        session.run(None, feeds)
    except Exception as exc:  # ONNX Runtime's, or the inputs' OptistudioError
        return True, False, f"{type(exc).__name__}: {first_line(exc)}"
    return True, True, ""


def _intake(context: _Context) -> tuple[str, dict[str, Any]]:
    """The upload: stored only when ONNX Runtime loads it (optistudio.services.catalog)."""
    assert context.source is not None
    stored = store_model(
        context.source, artifact_dir=context.folder / "store", load_check=check_loads
    )
    context.path, context.info = stored.path, stored.info
    ort.InferenceSession(str(stored.path), providers=["CPUExecutionProvider"])
    info = stored.info
    text = f"IR {info.ir_version}, opsets {info.opsets}, {info.node_count} nodes"
    return text, {"warnings": info.warnings, "inputs": [i.model_dump() for i in info.inputs]}


def _free_dims(context: _Context) -> tuple[str, dict[str, Any]]:
    """--free-dims: the stored model's checked copy with the conflicting dims freed, which the
    later stages run (the CLI runs every command on it)."""
    assert context.path is not None
    typed = context.typed
    path, line = freed_copy(
        context.path, shapes=typed.shapes, dims=typed.dims, folder=context.folder / "freed"
    )
    context.path, context.info = path, inspect_model(path)
    return line, {}


def _bench_on(context: _Context, backend: str) -> Callable[[], tuple[str, dict[str, Any]]]:
    def work() -> tuple[str, dict[str, Any]]:
        assert context.path is not None
        budgets = context.budgets
        spec = BenchmarkSpec(
            backend=backend, threads=budgets.threads, **budgets.bench, **context.inputs
        )
        report = run_benchmark(context.path, spec, info=context.info)
        context.benchmarks += [
            {"backend": r.backend, "batch_size": r.batch_size, "p50_ms": r.latency["p50_ms"]}
            for r in report.results
        ]
        parts = [
            f"b{r.batch_size} {_shapes(r.input_shapes)} p50 {r.latency['p50_ms']:.2f} ms"
            for r in report.results
        ]
        check = report.output_check
        if check is not None and not check.passed:
            parts.append("outputs disagree: " + "; ".join(check.problems))
        return "; ".join(parts), {
            "results": [r.model_dump() for r in report.results],
            "warnings": report.warnings,
        }

    return work


def _shapes(shapes: dict[str, list[int]]) -> str:
    return " ".join("x".join(map(str, shape)) or "scalar" for shape in shapes.values())


def _optimize(context: _Context) -> tuple[str, dict[str, Any]]:
    assert context.path is not None
    spec = OptimizeSpec(
        recipes=["auto"],
        comparison=ComparisonSpec(threads=context.budgets.threads, **context.budgets.comparison),
        accuracy_samples=context.budgets.accuracy_samples,
        pass_settings=QUICK_PASS_SETTINGS if context.budgets.quick else {},
        **context.inputs,
    )
    report = optimize(context.path, spec, out_dir=context.folder / "variants")
    context.report = report
    variants = {v.recipe.name: _variant_line(v) for v in report.variants}
    pick = auto_pick(report)
    made = len(report.made)
    return f"{made}/{len(report.variants)} made; Auto: {pick}", {
        "variants": variants,
        "chosen": report.chosen,
        "pick": pick,
    }


def auto_pick(report: OptimizeReport) -> str:
    """Auto's pick with its speedup and 95 % interval, or why it keeps the original."""
    chosen = next((v for v in report.variants if v.recipe.name == report.chosen), None)
    if chosen is None or not chosen.ratio:
        return "original (no variant significantly faster within budget)"
    return f"{chosen.recipe.name} {_speedup(chosen)}"


def _speedup(variant: VariantResult) -> str:
    if not variant.ratio:
        return "untimed"
    text = f"{1 / variant.ratio:.2f}x"
    if variant.ratio_low and variant.ratio_high:
        text += f" [{1 / variant.ratio_high:.2f}-{1 / variant.ratio_low:.2f}]"
    return text


def _variant_line(variant: VariantResult) -> str:
    if variant.status == "failed":
        return f"failed: {variant.error.message if variant.error else '?'}"
    if variant.status == "not_applicable":  # set apart with its sentence: no failure
        return variant.why_not_applicable()
    budget = "" if variant.within_budget else f", over budget ({variant.budget_note})"
    return f"{variant.backend} {variant.precision} {_speedup(variant)}{budget}"


def _profile(context: _Context) -> tuple[str, dict[str, Any]]:
    assert context.path is not None
    variant = _int8_variant(context.report)
    spec = DiagnosticsSpec(
        runs=context.budgets.profile_runs,
        warmup_runs=1,
        layer_error_batches=1,
        threads=context.budgets.threads,
        **context.inputs,
    )
    report = diagnose(
        context.path,
        spec,
        work_dir=context.folder / "profile",
        variant=Path(variant.path) if variant and variant.path else None,
    )
    text = f"{report.profile.plain_ms:.2f} ms"
    if report.comparison is not None and variant is not None:
        text += f"; {variant.recipe.name} x{report.comparison.ratio:.2f}"
    text += f"; {len(report.findings)} finding(s), {len(report.layer_errors)} layer row(s)"
    return text, {"notes": report.notes, "layer_error_note": report.layer_error_note}


def _int8_variant(report: OptimizeReport | None) -> VariantResult | None:
    """The first INT8 variant Auto made for ONNX Runtime: the profile job's usual pair."""
    made = report.made if report else []
    return next(
        (v for v in made if v.precision == "int8" and v.backend == "onnxruntime" and v.path), None
    )


def _soak(context: _Context) -> tuple[str, dict[str, Any]]:
    assert context.path is not None
    spec = SoakSpec(
        seconds=context.budgets.soak_seconds,
        batch_sizes=context.budgets.soak_batches,
        warmup_rounds=1,
        sample_interval_s=0.02,
        threads=context.budgets.threads,
        **context.inputs,
    )
    report = soak(context.path, spec, info=context.info)
    return f"{report.verdict}: {report.inferences} inferences", {"sentence": report.sentence}


def _batching(context: _Context) -> tuple[str, dict[str, Any]]:
    assert context.path is not None
    settings = settings_from({"max_batch_size": 4, "timeout_ms": 2.0})
    profile = measure_latency_profile(
        context.path,
        max_batch_size=4,
        target=RunTarget(threads=context.budgets.threads, spin_wait=False),
        min_runs=3,
        min_seconds=context.budgets.batching_min_seconds,
        inputs=ModelInputs(**context.inputs),
        probe_time_scale=context.budgets.batching_probe_scale,
    )
    ceiling, best = profile.ceiling(4, with_handoff=True)
    predicted = simulate(profile, settings, rate=0.7 * ceiling, requests=2000)
    text = (
        f"ceiling {ceiling:.0f}/s at b{best}; at 70 %: p99 {predicted.p99_ms:.2f} ms, "
        f"mean batch {predicted.mean_batch_size:.2f}"
    )
    return text, {"ceiling": ceiling, "best_batch": best}


def _export(context: _Context) -> tuple[str, dict[str, Any]]:
    assert context.path is not None and context.info is not None
    source = BundleSource(
        name=context.model.name,
        model_path=context.path,
        info=context.info,
        benchmarks=context.benchmarks,
        batch_sizes=sorted({b["batch_size"] for b in context.benchmarks}),
    )
    report = write_bundle(source, context.folder / "bundle" / f"{context.model.name}.zip")
    skipped = {k: v for k, v in report.skipped.items() if k != "tensorrt"}
    text = f"{len(report.files)} files" + (
        "; not included: " + "; ".join(skipped.values()) if skipped else ""
    )
    return text, {"skipped": report.skipped}


# --- the sweep and its table -----------------------------------------------------------------


def sweep(
    names: list[str],
    folder: Path,
    budgets: Budgets,
    *,
    workers: int = 1,
    torch_python: str | None = None,
) -> list[ModelRun]:
    """Run the named zoo models, each in its own folder; with `workers` > 1 in that many
    processes at once (the CI sweep: stage outcomes, not figures, are what it checks; timed
    figures from a parallel sweep are contended). Results come back in the order given."""
    jobs = [(name, folder / name, budgets, torch_python) for name in names]
    if workers <= 1:
        return [run_named(*job) for job in jobs]
    context = multiprocessing.get_context("spawn")  # no fork after ONNX Runtime's threads
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        return list(pool.map(run_named, *zip(*jobs, strict=True)))


def run_named(name: str, folder: Path, budgets: Budgets, torch_python: str | None) -> ModelRun:
    """`run_model` by zoo name (what a worker process receives: builders do not pickle)."""
    model = next(m for m in zoo(torch_python) if m.name == name)
    print(f"zoo: {name} ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    run = run_model(model, folder, budgets)
    print(f"zoo: {name} done in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return run


def stage_names(runs: list[ModelRun]) -> list[str]:
    """The stages the runs went through, in the order each run goes through them."""
    names: list[str] = []
    for run in runs:
        names += [o.stage for o in run.outcomes if o.stage not in names and o.stage != "build"]
    order = ["intake", "free-dims", *STAGES[1:]]
    return sorted(names, key=lambda stage: order.index(stage.split(":")[0]))


def markdown(runs: list[ModelRun]) -> str:
    """The outcome table (one row per model), the figures with Auto's pick, then every reason
    a stage gave for not doing its job."""
    stages = stage_names(runs)
    lines = [
        "| model | class | inputs typed | " + " | ".join(stages) + " |",
        "|" + " --- |" * (3 + len(stages)),
    ]
    notes: list[str] = []
    for run in runs:
        cells = [_cell(run.outcome(stage)) for stage in stages]
        notes += [
            f"- **{run.name}**, {o.stage} ({o.status}): {o.reason}"
            for o in run.outcomes
            if o.status in ("said", "bug") or (o.status == "skipped" and o.reason)
        ]
        optimize = run.outcome("optimize")
        notes += [
            f"- **{run.name}**, optimize, recipe {name} {line}"
            for name, line in (optimize.detail.get("variants", {}) if optimize else {}).items()
            if line.startswith(("failed", "not applicable"))
        ]
        flags = f"`{run.flags}`" if run.flags else "-"
        lines.append(f"| {run.name} | {run.kind} | {flags} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| model | bench (p50 per batch size) | variants made / tried | Auto's pick, speedup "
        "[95 % interval] |",
        "| --- | --- | --- | --- |",
        *(_figures_row(run) for run in runs if run.outcome("optimize")),
    ]
    return "\n".join([*lines, "", *notes])


def _figures_row(run: ModelRun) -> str:
    benches = [
        f"{o.stage.removeprefix('bench:')}: {o.reason}"
        for o in run.outcomes
        if o.stage.startswith("bench:") and o.status == "ok"
    ]
    optimize = run.outcome("optimize")
    variants = optimize.detail.get("variants", {}) if optimize else {}
    made = sum(not line.startswith(("failed", "not applicable")) for line in variants.values())
    pick = optimize.detail.get("pick", optimize.status) if optimize else ""
    return f"| {run.name} | {'<br>'.join(benches) or '-'} | {made} / {len(variants)} | {pick} |"


def load_runs(path: Path) -> list[ModelRun]:
    """The runs of a saved --json document, to print its table again (--table)."""
    document = json.loads(path.read_text())
    return [
        ModelRun(**{**run, "outcomes": [Outcome(**o) for o in run["outcomes"]]})
        for run in document["models"]
    ]


def _cell(outcome: Outcome | None) -> str:
    if outcome is None:
        return ""
    return {"ok": "ok", "said": "says", "bug": "**BUG**", "skipped": "-"}[outcome.status]


def totals(runs: list[ModelRun]) -> dict[str, int]:
    statuses = [o.status for run in runs for o in run.outcomes if o.stage != "build"]
    return {
        "models": len(runs),
        "ok": statuses.count("ok"),
        "said": statuses.count("said"),
        "bug": statuses.count("bug"),
        "skipped": statuses.count("skipped"),
        "accepted_unloadable": sum(run.accepted_unloadable for run in runs),
        "build_failed": sum(1 for run in runs if run.outcome("intake") is None),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="CI budgets (seconds per stage)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="these zoo models only")
    parser.add_argument("--torch-python", help="an interpreter with torch: adds the torch models")
    parser.add_argument("--out", type=Path, help="work folder (default: a temporary one)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--workers", type=int, default=1, help="models run at once (figures then contended)"
    )
    parser.add_argument("--table", type=Path, help="print the table of a saved --json run")
    args = parser.parse_args(argv)
    from optistudio.cli.output import json_stdout, print_json

    if args.table is not None:
        print(markdown(load_runs(args.table)))
        return 0

    names = [m.name for m in zoo(args.torch_python) if not args.only or m.name in args.only]
    folder = args.out or Path(tempfile.mkdtemp(prefix="optistudio-zoo-"))
    start = time.perf_counter()
    with json_stdout(args.json):
        budgets = QUICK if args.quick else FULL
        runs = sweep(names, folder, budgets, workers=args.workers, torch_python=args.torch_python)
        wall = time.perf_counter() - start
        if args.json:
            print_json(
                {
                    "totals": totals(runs),
                    "wall_s": round(wall, 1),
                    "cpu": hardware_inventory()["cpu"],
                    "models": [asdict(r) for r in runs],
                }
            )
    if not args.json:
        print(markdown(runs))
        print(f"\n{json.dumps(totals(runs))}; wall {wall:.0f} s")
    if args.out is None:
        shutil.rmtree(folder, ignore_errors=True)
    return 1 if totals(runs)["bug"] or totals(runs)["accepted_unloadable"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
