"""The `optistudio` command: the engine without the stack, and the parts of the stack.

Expected failures print their message (and hint) and exit 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.errors import InvalidSpec, OptistudioError

log = logging.getLogger("optistudio")

EXIT_REFUSED = 2


def parse_int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def parse_core_list(text: str) -> list[int]:
    try:
        cores = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected core numbers like 0,1 got {text!r}") from None
    if not cores or min(cores) < 0:
        raise argparse.ArgumentTypeError(f"expected core numbers like 0,1 got {text!r}")
    return cores


def parse_assignment(text: str) -> tuple[str, list[int]]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=D1,D2,..., got {text!r}")
    return name, parse_int_list(value)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="optistudio", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    bench = commands.add_parser("bench", help="benchmark an ONNX model here and now")
    bench.add_argument("model", type=Path, help="path to an .onnx file")
    bench.add_argument(
        "--backend",
        default="onnxruntime",
        help="backend name (default onnxruntime), or 'all' for every available backend",
    )
    bench.add_argument("--device", default="cpu")
    bench.add_argument("--batch", type=parse_int_list, help="batch sizes, e.g. 1,8")
    bench.add_argument(
        "--shape",
        type=parse_assignment,
        action="append",
        default=[],
        help="full shape of one input, NAME=D1,D2,... (repeatable)",
    )
    bench.add_argument(
        "--dim",
        type=parse_assignment,
        action="append",
        default=[],
        help="size of a named dynamic dim, NAME=N (repeatable), e.g. sequence=128",
    )
    bench.add_argument("--threads", type=int, help="intra-op threads (default: runtime's)")
    bench.add_argument(
        "--cpus", type=parse_core_list, help="pin the run to these CPU cores, e.g. 0,1"
    )
    bench.add_argument("--warmup", type=int, help="untimed warm-up runs")
    bench.add_argument("--min-runs", type=int, help="least timed runs (pairs with --vs)")
    bench.add_argument("--min-seconds", type=float)
    bench.add_argument("--max-seconds", type=float)
    bench.add_argument(
        "--vs",
        type=Path,
        metavar="B.onnx",
        help="compare against this model, interleaved: prints the B/A latency ratio and its CI",
    )
    bench.add_argument("--confidence", type=float, help="confidence level of --vs (default 0.95)")
    bench.add_argument("--json", action="store_true", help="print one JSON object")
    bench.add_argument("--save", action="store_true", help="store model and result in the database")
    add_optimize_parser(commands)
    backends_cmd = commands.add_parser(
        "backends", help="list the inference backends and whether each can run here"
    )
    backends_cmd.add_argument("--json", action="store_true", help="print JSON")
    commands.add_parser("up", help="migrate and run Redis, a worker and the studio")
    commands.add_parser("worker", help="run a Celery worker for the configured queues")
    commands.add_parser("ui", help="run the studio (Streamlit)")
    commands.add_parser("migrate", help="upgrade the database to the newest schema")
    return parser


def add_optimize_parser(commands: Any) -> None:
    optimize = commands.add_parser("optimize", help="make optimized variants of a model")
    optimize.add_argument("model", type=Path, help="path to an .onnx file")
    optimize.add_argument(
        "--recipe",
        action="append",
        default=[],
        help="recipe name or 'auto' (repeatable; default auto). See `optistudio recipes`.",
    )
    optimize.add_argument(
        "--calib",
        type=Path,
        help=".npz of named input arrays (samples first), or a folder or .zip of images",
    )
    optimize.add_argument("--image-size", type=parse_int_list, help="images: H,W to resize to")
    optimize.add_argument("--image-layout", choices=["NCHW", "NHWC"], help="images: layout")
    optimize.add_argument("--image-color", choices=["RGB", "BGR", "GRAY"], help="images: colour")
    optimize.add_argument("--image-mean", type=parse_float_list, help="images: per-channel mean")
    optimize.add_argument("--image-std", type=parse_float_list, help="images: per-channel std")
    optimize.add_argument("--labels", type=Path, help="labels (.npy or .csv) for top-1 accuracy")
    optimize.add_argument("--budget-cosine", type=float, help="least mean output cosine (0.99)")
    optimize.add_argument("--budget-top1-drop", type=float, help="largest top-1 drop (0.01)")
    optimize.add_argument("--seconds", type=float, help="timing per variant vs the original")
    optimize.add_argument(
        "--accuracy-output", help="output the accuracy budget judges (default: the first)"
    )
    optimize.add_argument("--out", type=Path, required=True, help="folder for the variant files")
    optimize.add_argument("--json", action="store_true", help="print one JSON object")
    optimize.add_argument("--save", action="store_true", help="store everything in the database")
    commands.add_parser("recipes", help="list the optimization recipes and passes")


def optimize_spec(args: argparse.Namespace) -> Any:
    from optistudio.jobspecs import OptimizeJobSpec

    budget = {"min_cosine": args.budget_cosine, "max_top1_drop": args.budget_top1_drop}
    fields: dict[str, Any] = {
        "recipes": [r for text in args.recipe for r in text.split(",") if r] or ["auto"],
        "budget": {k: v for k, v in budget.items() if v is not None},
        "data_path": str(args.calib.resolve()) if args.calib else None,
        "labels_path": str(args.labels.resolve()) if args.labels else None,
        "accuracy_output": args.accuracy_output,
        "image_preprocessing": _image_preprocessing(args),
    }
    if args.seconds is not None:
        fields["comparison"] = {"min_seconds": args.seconds, "max_seconds": 10 * args.seconds}
    return _validated(OptimizeJobSpec, fields, "optimize")


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


def parse_float_list(text: str) -> list[float]:
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected numbers like 0.5,0.5,0.5 got {text!r}"
        ) from None


def command_optimize(args: argparse.Namespace) -> int:
    """Variants per recipe, each with accuracy and speedup measured in this run."""
    from optistudio.settings import get_settings

    settings = get_settings()
    spec = optimize_spec(args)
    from core.intake import inspect_model

    info = inspect_model(args.model, max_bytes=settings.max_upload_bytes)
    if args.save:
        payload = _optimize_and_save(args.model, spec, settings)
    else:
        payload = _optimize_here(args.model, info, spec, args.out)
    payload["files"] = _export_variants(payload, args.out)
    if args.json:
        print(json.dumps(payload, indent=2, default=str))
    else:
        _print_variants(payload)
    return 0


def _optimize_here(model: Path, info: Any, spec: Any, out: Path) -> dict[str, Any]:
    from core.optimize import optimize

    data, labels = spec.open_data(info.inputs)
    report = optimize(model, spec.optimize_spec(), out_dir=out / "work", data=data, labels=labels)
    return report.model_dump(mode="json")


def _optimize_and_save(model_path: Path, spec: Any, settings: Any) -> dict[str, Any]:
    """Store the model, then run the optimization through a job row exactly as a worker does."""
    from db.models import JobKind, JobStatus
    from db.queries import create_job, get_job
    from db.session import make_session_factory, transaction
    from optistudio.catalog import add_model_file
    from optistudio.migrate import upgrade
    from workers.jobs import run_job
    from workers.optimize_task import optimize_job

    upgrade(settings.database_url, lock_dir=settings.data_dir)
    factory = make_session_factory(settings.database_url)
    entry = add_model_file(factory, settings, model_path, name=model_path.stem, origin="cli")
    with transaction(factory) as s:
        job_id = create_job(
            s, kind=JobKind.optimize, spec=spec.model_dump(mode="json"), model_id=entry.model_id
        ).id
    run_job(factory, job_id, worker=f"cli@{socket.gethostname()}", task_id=None, work=optimize_job)
    with transaction(factory) as s:
        job = get_job(s, job_id=job_id)
        if job is None or job.status != JobStatus.succeeded:
            raise OptistudioError(job.message if job else f"Job {job_id} vanished.")
        result: dict[str, Any] = dict(job.result or {})
    return result | {"model_id": entry.model_id, "job_id": job_id}


def _export_variants(payload: dict[str, Any], out: Path) -> dict[str, str]:
    """Copy each variant to OUT/<recipe>.onnx; returns recipe -> file."""
    import shutil

    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for variant in payload["variants"]:
        if variant.get("path"):
            target = out / f"{variant['recipe']['name']}.onnx"
            shutil.copyfile(variant["path"], target)
            files[variant["recipe"]["name"]] = str(target)
    return files


def _print_variants(payload: dict[str, Any]) -> None:
    print(f"data: {payload['data']}")
    print(
        f"{'recipe':<26}{'prec':>6}{'speedup':>9}{'95% CI':>15}{'cosine':>9}{'budget':>8}  verdict"
    )
    for v in payload["variants"]:
        name = v["recipe"]["name"] + (" *" if v["recipe"]["name"] == payload["chosen"] else "")
        if v.get("error"):
            print(f"{name:<26}{v['precision']:>6}  failed: {v['error']}")
            continue
        ci = f"{1 / v['ratio_high']:.2f}-{1 / v['ratio_low']:.2f}x"
        cosine = v["accuracy"]["mean_cosine"]
        budget = "ok" if v["within_budget"] else "miss"
        print(
            f"{name:<26}{v['precision']:>6}{v['speedup']:>8.2f}x{ci:>15}{cosine:>9.4f}"
            f"{budget:>8}  {v['verdict']}"
        )
    print(f"* chosen: {payload['chosen'] or 'none (keep the original)'}")


def command_recipes() -> int:
    from core.passes.base import passes
    from core.recipes import BUILTIN_RECIPES

    print("recipes: auto (candidates chosen for the model), " + ", ".join(BUILTIN_RECIPES))
    for info in passes:
        print(f"  pass {info.name:<14} {info.label}: {info.description}")
    return 0


def bench_spec(args: argparse.Namespace) -> Any:
    from core.benchmark import BenchmarkSpec

    fields = _common_fields(args) | {
        "batch_sizes": args.batch,
        "cpu_affinity": args.cpus,
        "warmup_runs": args.warmup,
        "min_runs": args.min_runs,
    }
    return _validated(BenchmarkSpec, fields, "benchmark")


def comparison_spec(args: argparse.Namespace) -> Any:
    from core.compare import ComparisonSpec

    if args.cpus:
        raise InvalidSpec("--cpus is not available with --vs yet; pin the shell with taskset.")
    batch = args.batch or [1]
    if len(batch) != 1:
        raise InvalidSpec(f"--vs compares at one batch size; got --batch {batch}.")
    fields = _common_fields(args) | {
        "batch_size": batch[0],
        "warmup_runs": args.warmup,
        "min_pairs": args.min_runs,
        "confidence": args.confidence,
    }
    return _validated(ComparisonSpec, fields, "comparison")


def _common_fields(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "backend": args.backend,
        "device": args.device,
        "threads": args.threads,
        "shapes": dict(args.shape),
        "dims": {name: _single(name, values) for name, values in args.dim},
        "min_seconds": args.min_seconds,
        "max_seconds": args.max_seconds,
    }


def _validated(spec_class: Any, fields: dict[str, Any], what: str) -> Any:
    from pydantic import ValidationError

    from core.errors import describe_validation_error

    try:
        return spec_class(**{k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        raise InvalidSpec(f"Invalid {what} options: {describe_validation_error(exc)}") from None


def _single(name: str, values: list[int]) -> int:
    if len(values) != 1:
        raise InvalidSpec(f"--dim {name} takes one size, got {values}.")
    return values[0]


def report_json(report: Any, info: Any) -> dict[str, Any]:
    """The CLI's JSON: the same figures a worker stores, one object per batch size."""
    results = []
    for result in report.results:
        row = {
            "backend": result.backend,
            "device": result.device,
            "batch_size": result.batch_size,
            "threads": result.threads,
        }
        row.update(result.metric_values())
        row["stable"] = result.stable
        row["window_p50s_ms"] = result.window_p50s_ms
        results.append(row)
    return {
        "model": {
            "sha256": info.sha256,
            "size_bytes": info.size_bytes,
            "opset": info.opset,
            "inputs": [t.model_dump() for t in info.inputs],
            "parameter_count": info.parameter_count,
            "flops_estimate": info.flops_estimate,
        },
        "spec": report.spec.model_dump(),
        "results": results,
        "environment": report.environment,
        "runtime": report.runtime_details,
        "warnings": report.warnings,
    }


def print_table(payload: dict[str, Any]) -> None:
    print(f"model sha256 {payload['model']['sha256'][:12]}  runtime {payload['runtime']}")
    header = f"{'backend':<12}{'batch':>6}{'thr':>5}{'p50 ms':>10}{'p90 ms':>10}{'p99 ms':>10}"
    print(header + f"{'inf/s':>11}{'runs':>7}{'spread':>8}  verdict")
    for r in payload["results"]:
        verdict = "stable" if r["stable"] else "UNSTABLE"
        print(
            f"{r['backend']:<12}{r['batch_size']:>6}{r['threads']:>5}{r['p50_ms']:>10.3f}"
            f"{r['p90_ms']:>10.3f}{r['p99_ms']:>10.3f}{r['throughput']:>11.1f}"
            f"{int(r['samples']):>7}{r['window_spread']:>7.1%}  {verdict} (cv {r['cv']:.1%})"
        )


def command_bench(args: argparse.Namespace) -> int:
    from core.benchmark import run_benchmark
    from core.intake import inspect_model
    from optistudio.settings import get_settings

    settings = get_settings()
    if args.vs is not None:
        return command_compare(args, settings)
    if args.backend == "all":
        return command_bench_all(args, settings)
    spec = bench_spec(args)
    info = inspect_model(args.model, max_bytes=settings.max_upload_bytes)
    if args.save:
        report, saved = _bench_and_save(args.model, spec, settings)
    else:
        report, saved = run_benchmark(args.model, spec, info=info), {}
    payload = report_json(report, info)
    payload.update(saved)
    for warning in payload["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps(payload, indent=2, default=str))
    else:
        print_table(payload)
    return 0


def command_bench_all(args: argparse.Namespace, settings: Any) -> int:
    """`bench --backend all`: the same measurement on every backend available here."""
    from core.backends import backends
    from core.benchmark import run_benchmark
    from core.errors import OptistudioError
    from core.intake import inspect_model

    if args.save:
        raise InvalidSpec("--save takes one backend; run one `bench --save` per backend.")
    info = inspect_model(args.model, max_bytes=settings.max_upload_bytes)
    runs, skipped = [], {}
    for backend in backends:
        availability = backend.create().availability()
        if not availability.ok:
            skipped[backend.name] = availability.reason
            continue
        args.backend = backend.name
        try:
            runs.append(report_json(run_benchmark(args.model, bench_spec(args), info=info), info))
        except OptistudioError as exc:  # one backend failing must not lose the others
            skipped[backend.name] = str(exc)
    payload = {"runs": runs, "skipped": skipped}
    if args.json:
        print(json.dumps(payload, indent=2, default=str))
    else:
        for run in runs:
            print_table(run)
        for name, reason in skipped.items():
            print(f"{name}: skipped ({reason})")
    return 0


def command_compare(args: argparse.Namespace, settings: Any) -> int:
    """`bench A --vs B`: the paired B/A latency ratio, its interval and the verdict."""
    from core.compare import compare_models
    from core.intake import inspect_model

    if args.save:
        raise InvalidSpec(
            "--save is not available with --vs yet; run the comparison in the studio."
        )
    spec = comparison_spec(args)
    info_a = inspect_model(args.model, max_bytes=settings.max_upload_bytes)
    info_b = inspect_model(args.vs, max_bytes=settings.max_upload_bytes)
    comparison = compare_models(args.model, args.vs, spec, info_a=info_a, info_b=info_b)
    payload = comparison.model_dump(mode="json") | {"a": str(args.model), "b": str(args.vs)}
    if args.json:
        print(json.dumps(payload, indent=2))
    else:
        print(f"A = {args.model}\nB = {args.vs}")
        print(
            f"p50 A {comparison.a_p50_ms:.3f} ms, B {comparison.b_p50_ms:.3f} ms, "
            f"{comparison.pairs} interleaved pairs"
        )
        print(comparison.sentence)
    return 0


def _bench_and_save(model_path: Path, spec: Any, settings: Any) -> tuple[Any, dict[str, int]]:
    """Store the model, then run the benchmark through a job row exactly as a worker does."""
    from core.benchmark import run_benchmark
    from db.models import JobKind, JobStatus
    from db.queries import create_job, get_job
    from db.session import make_session_factory, transaction
    from optistudio.catalog import add_model_file
    from optistudio.migrate import upgrade
    from workers.artifacts import model_of
    from workers.jobs import run_job
    from workers.tasks import record_benchmark

    upgrade(settings.database_url, lock_dir=settings.data_dir)
    factory = make_session_factory(settings.database_url)
    entry = add_model_file(factory, settings, model_path, name=model_path.stem, origin="cli")
    with transaction(factory) as s:
        job_id = create_job(
            s, kind=JobKind.benchmark, spec=spec.model_dump(mode="json"), model_id=entry.model_id
        ).id
    reports = []

    def work(job: Any, context: Any) -> tuple[str, int | None]:
        path, info = model_of(job)
        reports.append(run_benchmark(path, spec, info=info, progress=context.progress))
        return record_benchmark(context.factory, job.id, reports[0])

    run_job(factory, job_id, worker=f"cli@{socket.gethostname()}", task_id=None, work=work)
    with transaction(factory) as s:
        job = get_job(s, job_id=job_id)
        if job is None or job.status != JobStatus.succeeded:
            raise OptistudioError(job.message if job else f"Job {job_id} vanished.")
    return reports[0], {"model_id": entry.model_id, "job_id": job_id}


def command_worker() -> int:
    from optistudio.launcher import worker_command
    from optistudio.settings import get_settings
    from optistudio.telemetry import telemetry_off_env

    command = worker_command(get_settings())
    os.execvpe(command[0], command, telemetry_off_env())
    return 0  # pragma: no cover - exec does not return


def command_ui() -> int:
    from optistudio.launcher import ui_command
    from optistudio.settings import get_settings
    from optistudio.telemetry import telemetry_off_env

    settings = get_settings()
    command = ui_command(settings, settings.ui_port)
    os.execvpe(command[0], command, telemetry_off_env())
    return 0  # pragma: no cover


def command_migrate() -> int:
    from optistudio.migrate import upgrade
    from optistudio.settings import get_settings

    settings = get_settings()
    upgrade(settings.database_url, lock_dir=settings.data_dir)
    print("database is at the newest schema")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        if args.command == "bench":
            return command_bench(args)
        if args.command == "up":
            from optistudio.launcher import up
            from optistudio.settings import get_settings

            logging.getLogger("optistudio").setLevel(logging.INFO)
            return up(get_settings())
        if args.command == "optimize":
            return command_optimize(args)
        if args.command == "backends":
            from optistudio.cli_backends import command_backends

            return command_backends(args)
        if args.command == "recipes":
            return command_recipes()
        if args.command == "worker":
            return command_worker()
        if args.command == "ui":
            return command_ui()
        return command_migrate()
    except OptistudioError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        return EXIT_REFUSED


if __name__ == "__main__":
    sys.exit(main())
