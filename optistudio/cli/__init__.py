"""The `optistudio` command: the engine without the stack, and the parts of the stack.

Expected failures print their message (and hint) and exit 2, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from optistudio.cli.args import (
    add_input_flags,
    input_options,
    parse_core_list,
    parse_int_list,
    validated,
)
from optistudio.cli.batching import add_batching_parser, command_batching
from optistudio.cli.compare import add_compare_parser, command_compare_report
from optistudio.cli.diagnostics import (
    OPERATOR_PROFILE,
    add_diagnostics_parsers,
    command_operator_profile,
    command_soak,
)
from optistudio.cli.errors import job_failure, report_error
from optistudio.cli.export import add_export_parser, command_export
from optistudio.cli.inputs import add_inputs_parser, command_inputs
from optistudio.cli.jobs import add_jobs_parser, command_jobs
from optistudio.cli.llm import add_llm_parser, command_llm
from optistudio.cli.optimize import add_optimize_parser, command_optimize, command_recipes
from optistudio.cli.output import json_stdout, print_json
from optistudio.cli.serve import add_serve_parser, command_serve
from optistudio.cli.stored import (
    add_models_parser,
    add_results_parser,
    command_delete,
    command_models,
    command_results,
)
from optistudio.cli.up import add_up_parser, command_up
from optistudio.cli.video import add_video_parser, command_video
from optistudio.cli.worker import add_worker_parser, command_worker
from optistudio.core.errors import ErrorCode, ErrorInfo, InvalidSpec, OptistudioError, first_line

log = logging.getLogger("optistudio")


class Parser(argparse.ArgumentParser):
    """argparse's parser (its subcommands' parsers are of the same class), whose usage error
    on a command line that asks for --json also prints the one JSON document the command owes,
    {"error": {"code": "invalid_spec", ...}}: a program reading stdout gets a document, not
    nothing. The usage and the message go to stderr, and the exit code is 2, as argparse's."""

    def error(self, message: str) -> NoReturn:
        if "--json" in JSON_ARGV:
            info = ErrorInfo(
                code=ErrorCode.invalid_spec,
                message=f"{self.prog}: {message}",
                hint=f"See `{self.prog} --help`.",
            )
            print_json({"error": info.model_dump(mode="json", include={"code", "message", "hint"})})
        super().error(message)


JSON_ARGV: list[str] = []
"""The command line `main` parses (its argv, else sys.argv's), read by `Parser.error`."""


def build_parser() -> argparse.ArgumentParser:
    """Every command's parser: `bench`, then each room's own commands, then the services."""
    parser = Parser(prog="optistudio", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    add_bench_parser(commands)
    add_optimize_parser(commands)
    add_diagnostics_parsers(commands)
    add_export_parser(commands)
    add_compare_parser(commands)
    add_batching_parser(commands)
    add_inputs_parser(commands)
    add_video_parser(commands)
    add_llm_parser(commands)
    backends_cmd = commands.add_parser(
        "backends", help="list the inference backends and whether each can run here"
    )
    backends_cmd.add_argument("--json", action="store_true", help="print JSON")
    add_up_parser(commands)
    add_serve_parser(commands)
    add_worker_parser(commands)
    add_jobs_parser(commands)
    add_models_parser(commands)
    add_results_parser(commands)
    commands.add_parser("ui", help="run the studio (Streamlit)")
    commands.add_parser("migrate", help="upgrade the database to the newest schema")
    return parser


def add_bench_parser(commands: Any) -> None:
    """`bench`: time an ONNX model here and now (on one backend, or every one), or A/B it."""
    bench = commands.add_parser("bench", help="benchmark an ONNX model here and now")
    bench.add_argument("model", type=Path, help="path to an .onnx file")
    bench.add_argument(
        "--backend",
        default="onnxruntime",
        help="backend name (default onnxruntime), or 'all' for every available backend",
    )
    bench.add_argument(
        "--device", default="cpu", help="cpu (default), cuda:N, or npu:N (Ascend, CANN provider)"
    )
    bench.add_argument(
        "--precision",
        choices=["fp32", "fp16", "bf16", "int8", "all"],
        help="precision to run in (default fp32; 'all' with --backend all: every precision "
        "each backend lists); refused with the valid ones if unsupported",
    )
    bench.add_argument(
        "--provider",
        choices=["cpu", "cuda", "tensorrt", "openvino", "dnnl", "cann"],
        help="ONNX Runtime execution provider (default: the device's own; `backends --json` "
        "lists which this machine has)",
    )
    bench.add_argument(
        "--io-binding", action="store_true", help="ONNX Runtime: keep inputs bound on the device"
    )
    bench.add_argument("--batch", type=parse_int_list, help="batch sizes, e.g. 1,8")
    add_input_flags(bench)
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


def bench_spec(args: argparse.Namespace) -> Any:
    from optistudio.core.measure.benchmark import BenchmarkSpec

    fields = _common_fields(args) | {
        "batch_sizes": args.batch,
        "cpu_affinity": args.cpus,
        "warmup_runs": args.warmup,
        "min_runs": args.min_runs,
        "precision": args.precision,
        "execution_provider": args.provider,
        "io_binding": args.io_binding or None,
    }
    return validated(BenchmarkSpec, fields, "benchmark")


def comparison_spec(args: argparse.Namespace) -> Any:
    from optistudio.core.measure.compare import ComparisonSpec

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
    return validated(ComparisonSpec, fields, "comparison")


def _common_fields(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "backend": args.backend,
        "device": args.device,
        "threads": args.threads,
        "min_seconds": args.min_seconds,
        "max_seconds": args.max_seconds,
    } | input_options(args).fields()


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
        row["input_shapes"] = result.input_shapes
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
        "output_check": report.output_check.model_dump() if report.output_check else None,
        "warnings": report.warnings,
    }


def print_table(payload: dict[str, Any]) -> None:
    spec = payload["spec"]
    print(
        f"model sha256 {payload['model']['sha256'][:12]}  {spec['backend']} {spec['device']} "
        f"{spec['precision']}  runtime {payload['runtime']}"
    )
    from optistudio.cli.stability import stability_cells

    header = f"{'backend':<12}{'batch':>6}{'thr':>5}{'p50 ms':>10}{'p90 ms':>10}{'p99 ms':>10}"
    print(header + f"{'inf/s':>11}{'runs':>7}{'window':>8}  verdict")
    for r in payload["results"]:
        deviation, verdict = stability_cells(r, spec)
        if r.get("contended"):  # other processes competed for the CPU while it was measured
            verdict += f", CONTENDED ({r.get('other_cores', 0.0):.1f} cores busy elsewhere)"
        print(
            f"{r['backend']:<12}{r['batch_size']:>6}{r['threads']:>5}{r['p50_ms']:>10.3f}"
            f"{r['p90_ms']:>10.3f}{r['p99_ms']:>10.3f}{r['throughput']:>11.1f}"
            f"{int(r['samples']):>7}{deviation:>8}  {verdict}"
        )
    for r in payload["results"]:
        shapes = ", ".join(f"{name} {shape}" for name, shape in r["input_shapes"].items())
        print(f"batch {r['batch_size']} inputs: {shapes}")
    check = payload.get("output_check")
    if check:
        from optistudio.core.numerics.crosscheck import OutputCheck

        verdict = OutputCheck.model_validate(check).verdict()
        print(f"outputs vs {check['reference']} at {check['precision']}: {verdict}")


def command_bench(args: argparse.Namespace) -> int:
    from optistudio.cli.llm import decoder_bench

    if (code := decoder_bench(args)) is not None:  # a decoder: TTFT and tokens/s
        return code
    from optistudio.core.backends.loadable import check_loads
    from optistudio.core.measure.benchmark import run_benchmark
    from optistudio.core.model.intake import inspect_model
    from optistudio.services.settings import get_settings

    settings = get_settings()
    if args.vs is not None:
        return command_compare(args, settings)
    if args.backend == "all":
        return command_bench_all(args, settings)
    if args.precision == "all":
        raise InvalidSpec("--precision all goes with --backend all; name one precision here.")
    spec = bench_spec(args)
    info = inspect_model(args.model, load_check=check_loads)
    if args.save:
        report, saved = _bench_and_save(args.model, spec, settings)
    else:
        report, saved = run_benchmark(args.model, spec, info=info), {}
    payload = report_json(report, info)
    payload.update(saved)
    for warning in payload["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    if args.json:
        print_json(payload)
    else:
        print_table(payload)
    return 0


def command_bench_all(args: argparse.Namespace, settings: Any) -> int:
    """`bench --backend all`: the same measurement on every backend available here."""
    from optistudio.core.backends import backends
    from optistudio.core.backends.loadable import check_loads
    from optistudio.core.errors import OptistudioError
    from optistudio.core.measure.benchmark import run_benchmark
    from optistudio.core.model.intake import inspect_model

    if args.save:
        raise InvalidSpec("--save takes one backend; run one `bench --save` per backend.")
    info = inspect_model(args.model, load_check=check_loads)
    runs, skipped = [], {}
    every_precision = args.precision == "all"
    for backend in backends:
        availability = backend.create().availability()
        if not availability.ok:
            skipped[backend.name] = availability.reason
            continue
        args.backend = backend.name
        for precision in backend.precisions if every_precision else [args.precision]:
            args.precision = precision
            label = f"{backend.name} {precision}" if every_precision else backend.name
            try:
                report = run_benchmark(args.model, bench_spec(args), info=info)
                runs.append(report_json(report, info))
            except OptistudioError as exc:  # one target failing must not lose the others
                skipped[label] = str(exc)
    payload = {"runs": runs, "skipped": skipped}
    if args.json:
        print_json(payload)
    else:
        for run in runs:
            print_table(run)
        for name, reason in skipped.items():
            print(f"{name}: skipped ({reason})")
    return 0


def command_compare(args: argparse.Namespace, settings: Any) -> int:
    """`bench A --vs B`: the paired B/A latency ratio, its interval and the verdict."""
    from optistudio.core.backends.loadable import check_loads
    from optistudio.core.measure.compare import compare_models
    from optistudio.core.model.intake import inspect_model

    if args.save:
        raise InvalidSpec(
            "--save is not available with --vs yet; run the comparison in the studio."
        )
    spec = comparison_spec(args)
    info_a = inspect_model(args.model, load_check=check_loads)
    info_b = inspect_model(args.vs, load_check=check_loads)
    comparison = compare_models(args.model, args.vs, spec, info_a=info_a, info_b=info_b)
    payload = comparison.model_dump(mode="json") | {"a": str(args.model), "b": str(args.vs)}
    if args.json:
        print_json(payload)
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
    from optistudio.core.measure.benchmark import run_benchmark
    from optistudio.db.models import JobKind, JobStatus
    from optistudio.db.queries import create_job, get_job
    from optistudio.db.session import make_session_factory, transaction
    from optistudio.services.catalog import add_model_file
    from optistudio.services.migrate import upgrade
    from optistudio.workers.artifacts import model_of
    from optistudio.workers.jobs import run_job
    from optistudio.workers.measure_jobs import record_benchmark

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
            raise job_failure(job, job_id)
    return reports[0], {"model_id": entry.model_id, "job_id": job_id}


def command_ui() -> int:
    from optistudio.cli.exposure import check_exposure
    from optistudio.cli.launcher import ui_command
    from optistudio.services.settings import get_settings
    from optistudio.services.telemetry import telemetry_off_env

    settings = get_settings()
    check_exposure(settings)  # as `up`: no open studio beyond this machine by accident
    command = ui_command(settings, settings.ui_port)
    os.execvpe(command[0], command, telemetry_off_env())
    return 0  # pragma: no cover


def command_migrate() -> int:
    from optistudio.services.migrate import upgrade
    from optistudio.services.settings import get_settings

    settings = get_settings()
    upgrade(settings.database_url, lock_dir=settings.data_dir)
    print("database is at the newest schema")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    JSON_ARGV[:] = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    with json_stdout(getattr(args, "json", False)):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    """The command `args` names; an expected failure is reported (exit 2), a bug raises."""
    try:
        if args.command == "bench":
            return command_bench(args)
        if args.command == "up":
            return command_up(args)
        if args.command == "serve":
            return command_serve(args)
        if args.command == "optimize":
            return command_optimize(args)
        if args.command == "backends":
            from optistudio.cli.backends import command_backends

            return command_backends(args)
        if args.command == "recipes":
            return command_recipes(args)
        if args.command == OPERATOR_PROFILE:
            return command_operator_profile(args)
        if args.command == "soak":
            return command_soak(args)
        if args.command == "export":
            return command_export(args)
        if args.command == "compare":
            return command_compare_report(args)
        if args.command == "batching":
            return command_batching(args)
        if args.command == "inputs":
            return command_inputs(args)
        if args.command == "video":
            return command_video(args)
        if args.command == "llm":
            return command_llm(args)
        if args.command == "worker":
            return command_worker(args)
        if args.command == "jobs":
            if getattr(args, "jobs_action", None) == "delete":
                return command_delete(args, what="job")
            return command_jobs(args)
        if args.command == "models":
            return command_models(args)
        if args.command == "results":
            return command_results(args)
        if args.command == "ui":
            return command_ui()
        return command_migrate()
    except OptistudioError as exc:
        return report_error(exc.info(), as_json=getattr(args, "json", False))
    except Exception as exc:
        problem = _database_unreachable(exc)
        if problem is None:
            raise
        return report_error(problem, as_json=getattr(args, "json", False))


def _database_unreachable(exc: BaseException) -> ErrorInfo | None:
    """What to tell the user when `exc` means the database could not be reached, else None."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import OperationalError

    from optistudio.db.session import DatabaseUnavailable
    from optistudio.services.settings import get_settings

    reason = first_line(exc)
    connecting = isinstance(exc, OperationalError) and any(
        words in reason.lower() for words in _CONNECT_FAILURES
    )
    if not (connecting or isinstance(exc, DatabaseUnavailable)):
        return None  # a wrong statement or schema is a bug to see in full, not this
    url = make_url(get_settings().database_url).render_as_string(hide_password=True)
    return ErrorInfo(
        code=ErrorCode.database_unavailable,
        message=f"the database at {url} could not be reached: {reason}",
        hint="Start the database, or point OPTISTUDIO_DATABASE_URL at one that runs; "
        "nothing was changed.",
    )


_CONNECT_FAILURES = ("connection failed", "could not connect", "unable to open database")
"""How psycopg and SQLite say that no connection could be made."""
