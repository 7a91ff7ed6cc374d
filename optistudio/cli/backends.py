"""`optistudio backends`: the registered inference backends and whether each can run here."""

from __future__ import annotations

import argparse
from typing import Any

from optistudio.cli.output import print_json
from optistudio.core.backends import backends
from optistudio.core.backends.onnxruntime_backend import execution_providers

COLUMNS = ("name", "available", "devices", "precisions", "versions / reason")


def backends_payload() -> list[dict[str, Any]]:
    """One entry per registered backend, with its availability on this machine.

    `devices` are the ones usable here (empty when unavailable); `precisions` are the backend's
    own (a device may support fewer: the load says which). ONNX Runtime's entry has its
    execution providers (`--provider`), each with why it cannot run here when it cannot.
    """
    payload = []
    for spec in backends:
        availability = spec.create().availability()
        entry: dict[str, Any] = {
            "name": spec.name,
            "label": spec.label,
            "description": spec.description,
            "available": availability.ok,
            "reason": availability.reason,
            "devices": availability.devices if availability.ok else [],
            "precisions": spec.precisions,
            "versions": availability.versions,
        }
        if spec.name == "onnxruntime":
            entry["providers"] = execution_providers()
        payload.append(entry)
    return payload


def command_backends(args: argparse.Namespace) -> int:
    """Print the backends as JSON (--json) or as a table."""
    payload = backends_payload()
    if getattr(args, "json", False):
        print_json(payload)
    else:
        print_backends_table(payload)
    return 0


def print_backends_table(payload: list[dict[str, Any]]) -> None:
    rows = [COLUMNS, *(_row(entry) for entry in payload)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS) - 1)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        print("  ".join([*cells, row[-1]]).rstrip())


def _row(entry: dict[str, Any]) -> tuple[str, str, str, str, str]:
    versions = ", ".join(f"{name} {v}" for name, v in entry["versions"].items())
    last = versions if entry["available"] else entry["reason"]
    return (
        entry["name"],
        "yes" if entry["available"] else "no",
        ",".join(entry["devices"]) or "-",
        ",".join(entry["precisions"]),
        last or "-",
    )
