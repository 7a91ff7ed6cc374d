"""How a compared result is named: in the table, on hover, in a chart's legend and the report.

A result is what ran: the model, the recipe that made it ('original' for the file as it came),
its precision, the backend, the batch size and the threads ("2 threads", "default threads": 0
is the runtime's own choice, never "t0"). The full label names all of them. A chart's legend
names each point by what sets it apart from the others and says what they all share once, in
the legend's title, so every point is still named in full without long, alike entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

ORIGINAL = "original"
"""The recipe of a file as it came: no pass made it."""


class Named(Protocol):
    """What a label reads off a compared result (`snapshot.ResultRow`)."""

    key: str
    job_id: int
    model: str
    recipe: str
    precision: str
    backend: str
    batch_size: int
    threads: int
    metrics: dict[str, float | None]

    @property
    def flags(self) -> list[str]: ...


def threads_text(threads: int | None) -> str:
    """'1 thread', '4 threads'; 'default threads' for 0 or None (the runtime chose)."""
    if not threads:
        return "default threads"
    return f"{threads} thread" + ("s" if threads > 1 else "")


def what_ran(row: Named) -> str:
    """'tiny · original', 'tiny · Graph optimizations': the model and the recipe that made it
    (the model alone for a row stored before recipes were named)."""
    return f"{row.model} · {row.recipe}" if row.recipe else row.model


def how_it_ran(row: Named) -> list[str]:
    """Backend, precision, batch size and threads as words: the run's settings."""
    streams = row.metrics.get("streams")
    batch = f"video ×{streams:g} · max batch {row.batch_size}" if streams else ""
    batch = batch or f"batch {row.batch_size}"
    return [row.backend, row.precision or "fp32", batch, threads_text(row.threads)]


def result_label(row: Named) -> str:
    """'#3 tiny · Graph optimizations [fp32] · onnxruntime · batch 1 · default threads', with
    ' · CONTENDED' / ' · UNSTABLE' where the benchmark flagged its figures."""
    backend, precision, batch, threads = how_it_ran(row)
    flags = "".join(f" · {flag.upper()}" for flag in row.flags)
    return f"#{row.job_id} {what_ran(row)} [{precision}] · {backend} · {batch} · {threads}{flags}"


def _parts(row: Named) -> list[str]:
    """Model, recipe ('' when unnamed), backend, precision, batch and threads."""
    return [row.model, row.recipe, *how_it_ran(row)]


def shared_parts(rows: Sequence[Named]) -> str:
    """What every row has in common beyond its job ('tiny · original · onnxruntime · fp32 ·
    batch 1 · default threads' when they differ only in the job); '' for no rows."""
    columns = list(zip(*(_parts(row) for row in rows), strict=True))
    return " · ".join(column[0] for column in columns if len(set(column)) == 1 and column[0])


def legend_labels(rows: Sequence[Named]) -> list[str]:
    """Each row's legend entry: its job and what differs between the rows (the rest is in
    `shared_parts`); rows that still read alike get their key too, so no two entries match."""
    parts = [_parts(row) for row in rows]
    apart = [len(set(column)) > 1 for column in zip(*parts, strict=True)]
    labels = []
    for row, values in zip(rows, parts, strict=True):
        named = " · ".join(v for v, differs in zip(values, apart, strict=True) if differs and v)
        labels.append(f"#{row.job_id} {named}".strip())
    return [
        label if labels.count(label) == 1 else f"{label} ({row.key})"
        for label, row in zip(labels, rows, strict=True)
    ]
