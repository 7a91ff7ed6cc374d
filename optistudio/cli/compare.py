"""`optistudio compare RESULT... [--variant V...] [--html FILE] [--json]`: the Compare page's
report from the command line, on the stored results and optimize variants.

A RESULT is a benchmark job's id (all of its stored results: one per backend, batch size and
threads) or one row's key as the Compare page's URL has it (`12.openvino.1.2`: job, backend,
batch, threads; `v12.3`: an optimize variant). A VARIANT is an optimize job's id (each variant it timed, and the
original it was timed against), or one of them as `12.3` / `v12.3` (`12.o`: the original).
The report is the page's (optistudio.core.report.html): each row names its backend, device
and precision, and its contended and unstable flags; the environment it was measured in is
named, or how the rows' environments differ. Needs the database only.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from optistudio.cli.output import print_json
from optistudio.core.errors import InvalidSpec

_JOB = re.compile(r"\d{1,12}")
_VARIANT = re.compile(r"v?(\d{1,12})\.(o|\d{1,4})")


def add_compare_parser(commands: Any) -> None:
    compare = commands.add_parser(
        "compare", help="the Compare page's report on stored results and optimize variants"
    )
    compare.add_argument(
        "results",
        nargs="*",
        metavar="RESULT",
        help="a benchmark job id (all its results) or a result key JOB.BACKEND.BATCH.THREADS",
    )
    compare.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="V",
        help="an optimize job id (its timed variants and original) or JOB.INDEX (JOB.o: the "
        "original); repeatable",
    )
    compare.add_argument("--baseline", help="the key of the row the others are measured against")
    compare.add_argument("--html", type=Path, help="also write the report as one HTML file")
    compare.add_argument("--json", action="store_true", help="print one JSON object")


def command_compare_report(args: argparse.Namespace) -> int:
    from optistudio.core.report.html import report_html, report_json
    from optistudio.core.report.snapshot import shared_environment
    from optistudio.db.session import make_session_factory, transaction
    from optistudio.services.migrate import upgrade
    from optistudio.services.settings import get_settings
    from optistudio.studio.compare_services import Selection, build_snapshot, fit_axes

    if not args.results and not args.variant:
        raise InvalidSpec(
            "Nothing to compare.",
            hint="Name benchmark job ids or result keys, and/or --variant OPTIMIZE_JOB_ID "
            "(`optistudio jobs` lists them).",
        )
    settings = get_settings()
    upgrade(settings.database_url, lock_dir=settings.data_dir)
    factory = make_session_factory(settings.database_url)
    with transaction(factory) as s:
        keys = selected_keys(s, args.results, args.variant)
    selection = Selection(keys=keys, baseline=args.baseline if args.baseline in keys else None)
    snapshot, missing = build_snapshot(factory, selection, title="Comparison")
    if not snapshot.rows:
        raise InvalidSpec(
            f"None of {', '.join(keys) or 'the named jobs'} is a stored result.",
            hint="Give finished benchmark or optimize jobs (`optistudio jobs --json`).",
        )
    with transaction(factory) as s:
        devices = job_devices(s, sorted({row.job_id for row in snapshot.rows}))
    notes = fit_axes(snapshot, selection)
    notes += [f"{key}: not stored (deleted?); left out." for key in missing]
    if args.html:
        args.html.write_text(report_html(snapshot), encoding="utf-8")
    environment = shared_environment(snapshot)
    if args.json:
        payload = json.loads(report_json(snapshot))
        payload["rows_read"] = [_row_summary(row, devices) for row in snapshot.rows]
        payload["environment"] = environment
        payload["notes"] = notes
        payload["html"] = str(args.html) if args.html else None
        print_json(payload)
        return 0
    _print(snapshot, devices, environment, notes, args.html)
    return 0


def selected_keys(s: Any, results: list[str], variants: list[str]) -> list[str]:
    """The Compare keys the arguments name, in their order; InvalidSpec for one that is
    neither form, or a job with nothing stored."""
    from optistudio.db.selection import result_index
    from optistudio.studio.compare_services import KEY_PATTERN, result_key
    from optistudio.studio.compare_variants import VARIANT_PATTERN, variant_key, variant_options

    keys: list[str] = []
    index = None
    for text in results:
        text = text.strip()
        if KEY_PATTERN.fullmatch(text) or VARIANT_PATTERN.fullmatch(text):
            keys.append(text)  # as the Compare page's URL has it
        elif _JOB.fullmatch(text):
            index = index if index is not None else result_index(s)
            found = [
                result_key(r["job_id"], r["backend"], r["batch_size"], r["threads"])
                for r in index
                if r["job_id"] == int(text)
            ]
            if not found:
                raise InvalidSpec(
                    f"Job #{text} has no stored benchmark result.",
                    hint="Give a finished benchmark job's id, or its optimize run as --variant.",
                )
            keys += found
        else:
            raise InvalidSpec(
                f"{text!r} is not a result: give a job id (12) or a key (12.openvino.1.2).",
            )
    options = variant_options(s) if variants else {}
    for text in variants:
        text = text.strip()
        match = _VARIANT.fullmatch(text)
        if match:
            keys.append(variant_key(int(match[1]), None if match[2] == "o" else int(match[2])))
        elif _JOB.fullmatch(text):
            found = [key for key in options if key.startswith(f"v{text}.")]
            if not found:
                raise InvalidSpec(
                    f"Optimize job #{text} has no timed variant stored.",
                    hint="Give a finished optimize job's id (`optistudio jobs`).",
                )
            keys += found
        else:
            raise InvalidSpec(
                f"{text!r} is not a variant: give an optimize job id (12) or 12.3 (12.o: the "
                "original)."
            )
    return list(dict.fromkeys(keys))


def job_devices(s: Any, job_ids: list[int]) -> dict[int, str]:
    """The device each job's spec ran on ('cpu' where its kind names none)."""
    from optistudio.db.queries import job_results

    return {
        job_id: str(spec.get("device") or "cpu")
        for job_id, (spec, _) in job_results(s, job_ids=job_ids).items()
    }


def _row_summary(row: Any, devices: dict[int, str]) -> dict[str, Any]:
    """What one row is, in words: its label, backend, device, precision and flags."""
    return {
        "key": row.key,
        "label": row.label,
        "model": row.model,
        "backend": row.backend,
        "device": devices.get(row.job_id, "cpu"),
        "precision": row.precision or "fp32",
        "batch_size": row.batch_size,
        "threads": row.threads,
        "flags": row.flags,
    }


def _print(
    snapshot: Any, devices: dict[int, str], environment: str, notes: list[str], html: Path | None
) -> None:
    from optistudio.core.report.metric_info import label_of
    from optistudio.core.report.snapshot import environment_differences, table_records

    metric = snapshot.latency_metric
    print(f"{'result':<64} {'device':>6} {label_of(metric)[:14]:>14}  flags")
    for row, record in zip(snapshot.rows, table_records(snapshot), strict=True):
        value = record.get(metric)
        shown = "—" if value is None else f"{value:.3f}"
        device = devices.get(row.job_id, "cpu")
        print(f"{row.label[:64]:<64} {device:>6} {shown:>14}  {', '.join(row.flags) or '-'}")
    if environment:
        print(f"measured on: {environment}")
    for sentence in environment_differences(snapshot):
        print(f"environments differ: {sentence}")
    if any(row.flags for row in snapshot.rows):
        print("read with care: contended or unstable figures are marked")
    for note in notes:
        print(f"note: {note}")
    if html:
        print(f"report: {html}")
