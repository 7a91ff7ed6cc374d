"""A comparison as files: one self-contained HTML report (Plotly inlined, works offline), CSV, JSON.

The HTML carries plotly.js once, inline, so it opens without a network; the data in it is the
snapshot's, Pareto axes included, so the report shows exactly what the page showed.
"""

from __future__ import annotations

import csv
import html
import io
import json

from optistudio.core.report.figure_text import IDENTICAL_NOTE, figure_text
from optistudio.core.report.figures import distribution_figure, pareto_figure, throughput_figure
from optistudio.core.report.metric_info import column_title, label_of
from optistudio.core.report.snapshot import (
    CompareSnapshot,
    decoder_note,
    environment_differences,
    missing_notes,
    pareto_title,
    shared_environment,
    table_metrics,
    table_records,
    video_note,
)

STYLE = """
body{font-family:system-ui,sans-serif;margin:2rem;color:#222}
table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #ccc;padding:4px 8px}
td.best{background:#e3f4e3;font-weight:600}.warn{background:#fff4e0;padding:8px;border-radius:4px}
td.num{text-align:right}
"""


def report_csv(snapshot: CompareSnapshot) -> str:
    """The table as CSV: one row per result, each metric with its delta and best flag."""
    records = table_records(snapshot)
    out = io.StringIO()
    if records:
        writer = csv.DictWriter(out, fieldnames=list(records[0]))
        writer.writeheader()
        writer.writerows(records)
    return out.getvalue()


def report_json(snapshot: CompareSnapshot) -> str:
    """The snapshot itself plus the computed table, frontier and sweet spot."""
    payload = snapshot.model_dump(mode="json") | {
        "table": table_records(snapshot),
        "pareto_keys": [snapshot.rows[i].key for i in snapshot.frontier()],
        "sweet_spot": _sweet_key(snapshot),
        "environment_differences": environment_differences(snapshot),
    }
    return json.dumps(payload, indent=2)


def _sweet_key(snapshot: CompareSnapshot) -> str | None:
    index = snapshot.sweet_spot()
    return None if index is None else snapshot.rows[index].key


def report_html(snapshot: CompareSnapshot) -> str:
    """One HTML file with the table, the warnings and the three charts; no network needed."""
    figures = [pareto_figure(snapshot), throughput_figure(snapshot), distribution_figure(snapshot)]
    charts = [
        fig.to_html(full_html=False, include_plotlyjs=(i == 0), config={"displaylogo": False})
        for i, fig in enumerate(figures)
    ]
    pareto = f"{pareto_title(snapshot)} (Pareto frontier)"
    titles = [pareto, "Throughput vs p99 latency", "Latency spread"]
    body = [f"<h1>{html.escape(snapshot.title)}</h1>", _summary(snapshot), _warnings(snapshot)]
    body.append(_table(snapshot))
    for note in (video_note(snapshot), decoder_note(snapshot), *missing_notes(snapshot)):
        body.append(f"<p>{html.escape(note)}</p>" if note else "")
    body.append(_accuracy_sources(snapshot))
    body += [f"<h2>{t}</h2>{c}" for t, c in zip(titles, charts, strict=True)]
    body.append(_disagreements(snapshot))
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(snapshot.title)}</title><style>{STYLE}</style></head>"
        f"<body>{''.join(body)}</body></html>"
    )


def _summary(snapshot: CompareSnapshot) -> str:
    parts = [f"{len(snapshot.rows)} result(s)", f"created {snapshot.created_at or 'now'}"]
    base = snapshot.baseline_row()
    if base is not None:
        parts.append(f"baseline {base.label}")
    sweet = snapshot.sweet_spot()
    if snapshot.budget_ms is not None:
        best = snapshot.rows[sweet].label if sweet is not None else "nothing fits"
        latency = label_of(snapshot.latency_metric)
        parts.append(f"sweet spot with {latency} under {snapshot.budget_ms:g} ms: {best}")
    return f"<p>{html.escape(' · '.join(parts))}</p>"


def _warnings(snapshot: CompareSnapshot) -> str:
    problem = snapshot.axes_problem()
    axes = f"<p class='warn'>{html.escape(problem)}</p>" if problem else ""
    if contended := snapshot.contended_baseline():
        axes += f"<p class='warn'><b>Deltas flagged</b>: {html.escape(contended)}</p>"
    flagged = "".join(f"<li>{html.escape(r.label)}</li>" for r in snapshot.rows if r.flags)
    if flagged:
        axes += (
            "<div class='warn'><b>Read with care</b>: another process took CPU (CONTENDED) or the "
            f"latency never settled (UNSTABLE) while these ran.<ul>{flagged}</ul></div>"
        )
    differences = environment_differences(snapshot)
    if not differences:
        named = shared_environment(snapshot)
        where = f": {html.escape(named)}" if named else ""
        return f"{axes}<p>All results were measured in the same environment{where}.</p>"
    items = "".join(f"<li>{html.escape(d)}</li>" for d in differences)
    return f"{axes}<div class='warn'><b>Environments differ</b><ul>{items}</ul></div>"


def _accuracy_sources(snapshot: CompareSnapshot) -> str:
    """Where each result's accuracy figures come from (its note, as the Compare page's
    expander lists it): the samples a variant was judged on, 'your data' only for the user's."""
    items = "".join(
        f"<li>{html.escape(r.label)}: {html.escape(r.accuracy_note)}</li>"
        for r in snapshot.rows
        if r.accuracy_note
    )
    return (
        f"<div><b>Where the accuracy figures come from</b><ul>{items}</ul></div>" if items else ""
    )


def _table(snapshot: CompareSnapshot) -> str:
    columns = table_metrics(snapshot)
    head = "".join(f"<th>{html.escape(column_title(m))}</th>" for m in columns)
    rows = []
    for record in table_records(snapshot):
        flags = "★ " * record["sweet spot"] + "◆ " * record["pareto"] + "⚑ " * record["baseline"]
        cells = "".join(_cell(record, m) for m in columns)
        rows.append(f"<tr><td>{flags}{html.escape(record['result'])}</td>{cells}</tr>")
    legend = (
        "<p>★ sweet spot · ◆ on the Pareto frontier · ⚑ baseline · green: best in column "
        "(accuracy within 1e-6 and latency within its noise are ties, crowning nobody) · "
        f"{html.escape(IDENTICAL_NOTE, quote=False)}</p>"
    )
    return f"<h2>Results</h2>{legend}<table><tr><th>result</th>{head}</tr>{''.join(rows)}</table>"


DRILLDOWN_ROWS = 10
"""Samples listed per variant in the report's drill-down."""


def _disagreements(snapshot: CompareSnapshot) -> str:
    """Per variant, the samples where it and its original disagree most, both readings."""
    parts = []
    for row in snapshot.rows:
        if not row.disagreements:
            continue
        lines = "".join(
            "<tr>"
            + "".join(
                f"<td>{html.escape(str(d.get(field) if d.get(field) is not None else ''))}</td>"
                for field in ("sample", "reference", "candidate", "label")
            )
            + f"<td class='num'>{float(d.get('severity', 0.0)):.4g}</td></tr>"
            for d in row.disagreements[:DRILLDOWN_ROWS]
        )
        task = f" ({row.task})" if row.task else ""
        parts.append(
            f"<h3>{html.escape(row.label + task)}</h3><table><tr><th>sample</th>"
            "<th>original</th><th>variant</th><th>label</th><th>how far</th></tr>"
            f"{lines}</table>"
        )
    if not parts:
        return ""
    return "<h2>Where variants and their originals disagree most</h2>" + "".join(parts)


def _cell(record: dict[str, object], metric: str) -> str:
    value, change = record[metric], record[f"{metric} delta"]
    if value is None:
        why = html.escape(str(record.get(f"{metric} missing") or "not measured"), quote=True)
        return f"<td title='{why}'>—</td>"
    text = figure_text(metric, value) + (f" ({change:+.1%})" if isinstance(change, float) else "")
    css = "num best" if record[f"{metric} best"] else "num"
    return f"<td class='{css}' title='{value!r}'>{html.escape(text)}</td>"
