"""`optistudio operator-profile` and `optistudio soak`: operator profiles, the INT8 explainer,
memory soak."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from optistudio.cli.args import (
    add_input_flags,
    input_options,
    parse_int_list,
    resolved_inputs,
    validated,
)
from optistudio.cli.output import print_json

TOP_N = 15


OPERATOR_PROFILE = "operator-profile"
"""The operator profile's verb; `profile`, its former name, is still accepted (an alias)."""


def add_diagnostics_parsers(commands: Any) -> None:
    profile = commands.add_parser(
        OPERATOR_PROFILE,
        aliases=["profile"],
        help="per-operator profile; with --variant, compare and explain INT8 (formerly "
        "'profile', still accepted)",
    )
    profile.set_defaults(command=OPERATOR_PROFILE)  # the alias runs as the verb it stands for
    profile.add_argument("model", type=Path, help="path to an .onnx file")
    profile.add_argument("--variant", type=Path, help="a variant of it (e.g. INT8) to compare")
    profile.add_argument("--backend", choices=["onnxruntime", "openvino"], default="onnxruntime")
    profile.add_argument("--batch", type=int, help="batch size (default 1)")
    profile.add_argument("--runs", type=int, help="profiled runs (default 30)")
    profile.add_argument("--threads", type=int, help="intra-op threads")
    add_input_flags(profile)
    profile.add_argument("--calib", type=Path, help=".npz for the per-layer error (else synthetic)")
    profile.add_argument("--top", type=int, default=TOP_N, help="nodes shown (default 15)")
    profile.add_argument("--json", action="store_true", help="print one JSON object")
    soak = commands.add_parser("soak", help="run a model for a while and test memory for leaks")
    soak.add_argument("model", type=Path, help="path to an .onnx file")
    soak.add_argument("--seconds", type=float, help="how long to run (default 30)")
    soak.add_argument("--max-inferences", type=int, help="stop after this many inferences")
    soak.add_argument("--backend", default="onnxruntime")
    soak.add_argument("--batch", type=parse_int_list, help="batch sizes cycled (default 1,2,4,8)")
    soak.add_argument("--threads", type=int, help="intra-op threads")
    add_input_flags(soak)
    soak.add_argument("--json", action="store_true", help="print one JSON object")


def command_operator_profile(args: argparse.Namespace) -> int:
    from optistudio.core.data.datasets import open_dataset
    from optistudio.core.diagnose.diagnostics import DiagnosticsSpec, diagnose
    from optistudio.core.model.intake import inspect_model

    fields = {
        "backend": args.backend,
        "batch_size": args.batch,
        "runs": args.runs,
        "threads": args.threads,
    } | input_options(args).fields()
    spec = validated(DiagnosticsSpec, fields, "operator profile")
    data = None
    if args.calib:
        inputs = inspect_model(args.model).inputs
        data = open_dataset(args.calib, inputs, batch_size=spec.batch_size)
    with tempfile.TemporaryDirectory(prefix="optistudio-profile-") as work:
        report = diagnose(args.model, spec, work_dir=Path(work), variant=args.variant, data=data)
    if args.json:
        print_json(report.model_dump(mode="json") | {"inputs": resolved_inputs(args)})
    else:
        _print_operator_profile(report, args.top)
    return 0


def command_soak(args: argparse.Namespace) -> int:
    from optistudio.core.measure.soak import SoakSpec, soak

    fields = {
        "backend": args.backend,
        "seconds": args.seconds,
        "max_inferences": args.max_inferences,
        "batch_sizes": args.batch,
        "threads": args.threads,
    } | input_options(args).fields()
    report = soak(args.model, validated(SoakSpec, fields, "soak"))
    if args.json:
        print_json(report.model_dump(mode="json") | {"inputs": resolved_inputs(args)})
    else:
        print(report.sentence)
        print(
            f"RSS {report.rss_start_mb:.1f} -> {report.rss_end_mb:.1f} MiB "
            f"(peak {report.rss_peak_mb:.1f}) over {report.duration_s:.1f} s; "
            f"GPU memory {report.gpu_memory}"
        )
    return 0


def _print_operator_profile(report: Any, top: int) -> None:
    for profile in filter(None, (report.profile, report.variant)):
        shapes = "".join(f", {name} {shape}" for name, shape in profile.input_shapes.items())
        print(
            f"{profile.model} on {profile.backend}, batch {profile.batch_size}{shapes}: "
            f"{profile.plain_ms:.3f} ms per inference (profiler overhead x{profile.overhead:.2f})"
        )
        _table(
            ["node", "graph node", "op", "precision", "us", "share"],
            [
                [n.node, n.graph_node, n.op_type, n.precision, f"{n.time_us:.1f}", f"{n.share:.1%}"]
                for n in profile.nodes[:top]
            ],
        )
        print()
    if report.comparison is not None:
        c = report.comparison
        print(f"{c.b_model} vs {c.a_model}: x{c.ratio:.2f} time per inference")
        _table(
            ["op family", "A us", "B us", "B/A", "change"],
            [
                [f.family, f"{f.a_us:.1f}", f"{f.b_us:.1f}", f"{f.ratio:.2f}" if f.ratio else "-"]
                + [f.change]
                for f in c.families
            ],
        )
        print()
    if report.breakdown is not None:
        stages = ", ".join(
            f"{s.stage} {s.ms:.3f} ms ({s.share:.0%})" for s in report.breakdown.stages
        )
        print(f"Stages per batch of {report.breakdown.batch_size}: {stages}")
    for finding in report.findings:
        print(
            f"[{finding.severity}] {finding.title}\n  {finding.detail}\n  -> {finding.suggestion}"
        )
    for note in [*report.notes, report.layer_error_note]:
        if note:
            print(note)


def _table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)))
