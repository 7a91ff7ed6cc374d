"""What the Diagnostics page does, as plain functions that tests call without Streamlit.

The page submits profile and soak jobs by task name and draws what their results hold; the
figures are built here from the stored results (read back as their models), so every chart can
be checked without a browser.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from sqlalchemy.orm import Session, sessionmaker

from optistudio.core.diagnose.layer_report import shorten
from optistudio.core.diagnose.operator_profile import OperatorProfile
from optistudio.core.diagnose.profile_compare import ProfileComparison
from optistudio.core.measure.soak import SoakReport
from optistudio.core.measure.stages import Breakdown
from optistudio.core.model.info import precision_label
from optistudio.db.models import JobKind, JobStatus
from optistudio.db.queries import list_models
from optistudio.db.session import transaction
from optistudio.services.jobkinds import BATCHING_VERIFY, OperatorProfileJobSpec
from optistudio.studio.charts import readable
from optistudio.studio.formatting import readable_frame
from optistudio.studio.jobs_services import SendTask, jobs_of, submit_job
from optistudio.studio.jobs_services import recent_jobs as diagnostic_jobs  # noqa: F401 - the page's name

TOP_OP_TYPES = 12
"""Op types drawn one bar each; the rest share one bar."""
TOP_FAMILIES = 15
"""Op families in the FP32-vs-variant chart (all are in the table under it)."""
TOP_LAYERS = 15
"""Layers in the per-layer error chart (all are in the table under it)."""
NAMES_SHOWN = 8
"""Node names written in a sentence; the page lists the rest in an expander."""
STAGE_MS = "time (ms)"
QUEUE_WAIT_JOBS = 10
"""Newest batching verifications read for a queue wait (the first that reads is used)."""
CHANGE_COLOURS = {
    "faster": "#2ca02c",
    "slower": "#d62728",
    "new": "#ff7f0e",
    "gone": "#7f7f7f",
    "same": "#1f77b4",
}


def submit_operator_profile(
    factory: sessionmaker[Session], *, model_id: int, spec: OperatorProfileJobSpec, send: SendTask
) -> int:
    """Commit a profile job for the model (and its variant), then send it."""
    return submit_job(
        factory, kind=JobKind.operator_profile, model_id=model_id, spec=spec, send=send
    )


def variant_choices(factory: sessionmaker[Session], *, model_id: int) -> list[dict[str, Any]]:
    """Models to compare with `model_id`: its variants, original and siblings first, then the
    rest (a profile job refuses a model that is not the same network, and says why)."""
    with transaction(factory) as s:
        models = [(m.id, m.name, m.parent_id, _precision(m)) for m in list_models(s)]
    parent = next((p for i, _, p, _ in models if i == model_id), None)
    family = {model_id, parent} - {None}
    others = [m for m in models if m[0] != model_id]
    related = [m for m in others if m[2] in family or m[0] == parent]
    unrelated = [m for m in others if m not in related]
    return [
        {"id": i, "label": f"#{i} · {name} ({precision})", "related": True}
        for i, name, _, precision in related
    ] + [
        {"id": i, "label": f"#{i} · {name} ({precision}, not a variant of this model)"}
        | {"related": False}
        for i, name, _, precision in unrelated
    ]


def _precision(model: Any) -> str:
    """'fp32', 'int8', or 'already quantized (QDQ)' for an uploaded INT8 file."""
    return precision_label(model.precision, (model.info or {}).get("op_histogram") or {})


@dataclass(frozen=True)
class QueueWait:
    """A measured mean queue wait, and the job that measured it."""

    job: int
    kind: str
    queue_ms: float


def queue_wait(factory: sessionmaker[Session], *, model_id: int) -> QueueWait | None:
    """The newest measured queue wait of this model (from a batching verification), or None.

    Queue wait exists only where requests wait for a batch, so it comes from a dynamic-batching
    run (another job kind); a profile cannot measure it.
    """
    with transaction(factory) as s:
        jobs = [
            (job.id, BATCHING_VERIFY.read_result(job.result))
            for job in jobs_of(
                s,
                kind=JobKind.batching_verify,
                model_id=model_id,
                status=JobStatus.succeeded,
                limit=QUEUE_WAIT_JOBS,
            )
        ]
    for job_id, result in jobs:
        if result is not None:
            return QueueWait(job_id, BATCHING_VERIFY.label, result.measured.mean_queue_ms)
    return None


def top_nodes_frame(profile: OperatorProfile, n: int = 15) -> pd.DataFrame:
    """The `n` slowest nodes as a table with units in the headers."""
    rows = [
        {
            "node": node.node,
            "graph node": node.graph_node or "(added by the runtime)",
            "op type": node.op_type,
            "precision": node.precision or "?",
            "time (µs)": round(node.time_us, 2),
            "share": node.share,
        }
        for node in profile.nodes[:n]
    ]
    columns = ["node", "graph node", "op type", "precision", "time (µs)", "share"]
    return readable_frame(rows, columns=columns, keep=["share"])


def op_type_figure(profile: OperatorProfile, top: int = TOP_OP_TYPES) -> go.Figure:
    """Time per op type, slowest on top, with the precisions its nodes ran in; past `top` op
    types the rest share one bar ('K more op types'), so the chart stays readable."""
    shown, rest = profile.op_types[:top], profile.op_types[top:]
    names = [r.op_type for r in shown]
    times = [r.time_us for r in shown]
    shares = [r.share for r in shown]
    hover = [
        f"{r.nodes} node(s); " + ", ".join(f"{k}: {v}" for k, v in r.precisions.items())
        for r in shown
    ]
    if rest:
        names.append(f"{len(rest)} more op types")
        times.append(sum(r.time_us for r in rest))
        shares.append(sum(r.share for r in rest))
        hover.append(", ".join(r.op_type for r in rest))
    figure = go.Figure(
        go.Bar(
            x=times,
            y=names,
            orientation="h",
            text=[f"{share:.0%}" for share in shares],
            textposition="outside",
            cliponaxis=False,  # the slowest op's share stays whole beside its bar
            hovertext=hover,
        )
    )
    figure.update_layout(
        xaxis={"title": "time per inference (µs)", "range": [0, max(times, default=1) * 1.15]},
        yaxis={"autorange": "reversed", "type": "category"},
        height=max(260, 28 * len(names) + 90),
    )
    return readable(figure)


def not_in_precision_line(names: list[str], precision: str, shown: int = NAMES_SHOWN) -> str:
    """'Not in int8: conv1, conv2 and 40 more.' (the page lists them all in an expander)."""
    first = ", ".join(names[:shown])
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return f"Not in {precision}: {first}{more}."


def breakdown_frame(breakdown: Breakdown | None, wait: QueueWait | None) -> pd.DataFrame:
    """Stages of the layered breakdown; queue wait only when a batching run measured it."""
    stages = breakdown.stages if breakdown is not None else []
    rows = [{"stage": s.stage, STAGE_MS: s.ms, "detail": s.detail or None} for s in stages]
    if wait is not None:
        detail = f"mean queue wait measured by {wait.kind} job #{wait.job}"
        rows.insert(0, {"stage": "queue wait", STAGE_MS: wait.queue_ms, "detail": detail})
    return readable_frame(rows, columns=["stage", STAGE_MS, "detail"])


def breakdown_figure(frame: pd.DataFrame) -> go.Figure:
    """One stacked bar: where a batch's time goes, stage by stage."""
    figure = go.Figure(
        [
            go.Bar(
                x=[row[STAGE_MS]],
                y=["batch"],
                orientation="h",
                name=row["stage"],
                text=[row["stage"]],
            )
            for _, row in frame.iterrows()
        ]
    )
    figure.update_layout(barmode="stack", xaxis_title="ms per batch", height=220)
    return readable(figure)


def comparison_frame(comparison: ProfileComparison) -> pd.DataFrame:
    rows = [
        {
            "op family": f.family,
            "A (µs)": round(f.a_us, 2),
            "B (µs)": round(f.b_us, 2),
            "B / A": f.ratio,
            "change": f.change,
            "nodes A → B": f"{f.a_nodes} → {f.b_nodes}",
        }
        for f in comparison.families
    ]
    columns = ["op family", "A (µs)", "B (µs)", "B / A", "change", "nodes A → B"]
    return readable_frame(rows, columns=columns, numbers={"B / A": "{:.2f}"})


def comparison_figure(comparison: ProfileComparison) -> go.Figure:
    """A and B time per op family side by side, B coloured by what changed."""
    families = comparison.families[:TOP_FAMILIES]
    names = [f.family for f in families]
    figure = go.Figure(
        [
            go.Bar(name=comparison.a_model, x=names, y=[f.a_us for f in families]),
            go.Bar(
                name=comparison.b_model,
                x=names,
                y=[f.b_us for f in families],
                marker_color=[CHANGE_COLOURS[f.change] for f in families],
                hovertext=[f.change for f in families],
            ),
        ]
    )
    figure.update_layout(barmode="group", yaxis_title="time per inference (µs)", height=380)
    return readable(figure)


def layer_error_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Per-layer error, worst first, with where each node sits in the original graph; a long
    node label is shortened in its cell and kept whole in the last column."""
    table = [
        {
            "rank": r["rank"],
            "node (original graph)": _short_label(r),
            "op type": r["op_type"],
            "graph index": r["graph_index"],
            "fed by": ", ".join(shorten(name) for name in r["fed_by"]) or "the model's inputs",
            "SQNR (dB)": round(r["sqnr_db"], 2),
            "cosine": round(r["cosine"], 5),
            "noise added": r["noise_added"],
            "exclude as": r["quantized_node"] or None,
            "full name": _label(r),
        }
        for r in rows
    ]
    columns = ["rank", "node (original graph)", "op type", "graph index", "fed by", "SQNR (dB)"]
    return readable_frame(
        table, columns=[*columns, "cosine", "noise added", "exclude as", "full name"]
    )


def layer_error_figure(rows: list[dict[str, Any]], n: int = TOP_LAYERS) -> go.Figure:
    """SQNR of the worst `n` layers (ranked by noise added), one bar per row: the axis is keyed
    on each row's unique label and shows it shortened; the hover names it whole."""
    worst = list(reversed(rows[:n]))
    keys = [_label(r) for r in worst]
    figure = go.Figure(
        go.Bar(
            x=[r["sqnr_db"] for r in worst],
            y=keys,
            orientation="h",
            hovertext=[
                f"{_label(r)} ({r['op_type']}, graph node #{r['graph_index']}), fed by "
                f"{', '.join(r['fed_by']) or 'inputs'}; cosine {r['cosine']:.4f}; "
                f"noise added {r['noise_added']:.3g}"
                for r in worst
            ],
        )
    )
    figure.update_layout(
        xaxis_title="SQNR (dB, higher is better)",
        yaxis={
            "type": "category",
            "tickmode": "array",
            "tickvals": keys,
            "ticktext": [_short_label(r) for r in worst],
        },
        height=max(260, 26 * len(worst) + 90),
    )
    return readable(figure)


def _label(row: dict[str, Any]) -> str:
    """The row's unique label; rows stored before labels get one from their name and rank."""
    return str(row.get("label") or f"{row['node'] or row['op_type']} (rank {row['rank']})")


def _short_label(row: dict[str, Any]) -> str:
    return str(row.get("short_label") or shorten(_label(row)))


def soak_figure(result: SoakReport) -> go.Figure:
    """RSS against inferences, with the fitted growth line."""
    samples = result.samples
    x = [s[0] for s in samples]
    rss = [s[2] for s in samples]
    figure = go.Figure(go.Scatter(x=x, y=rss, mode="lines+markers", name="RSS"))
    if samples:
        mean_x, mean_y = sum(x) / len(x), sum(rss) / len(rss)
        slope_mb = result.slope_bytes / 2**20
        fit = [mean_y + slope_mb * (value - mean_x) for value in (x[0], x[-1])]
        figure.add_trace(
            go.Scatter(
                x=[x[0], x[-1]], y=fit, mode="lines", name="fitted growth", line={"dash": "dash"}
            )
        )
    figure.update_layout(xaxis_title="inferences", yaxis_title="RSS (MiB)", height=340)
    return readable(figure)
