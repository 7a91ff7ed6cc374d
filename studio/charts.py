"""Plotly figures for the studio, built from plain data frames."""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go

PERCENTILE_COLUMNS = (("p50_ms", "p50"), ("p90_ms", "p90"), ("p99_ms", "p99"))


def latency_by_batch(wide: pd.DataFrame) -> go.Figure:
    """Latency percentiles per batch size, one line per (job, percentile); p50 has p10-p90 bars."""
    figure = go.Figure()
    for job_id, runs in wide.groupby("job_id", sort=False):
        runs = runs.sort_values("batch_size")
        name = f"job {job_id} · {runs['model_name'].iloc[0]} · {runs['backend'].iloc[0]}"
        for column, label in PERCENTILE_COLUMNS:
            if column not in runs:
                continue
            figure.add_trace(
                go.Scatter(
                    x=runs["batch_size"],
                    y=runs[column],
                    mode="lines+markers",
                    name=f"{label} · {name}",
                    error_y=_spread(runs) if column == "p50_ms" else None,
                    marker={"symbol": _flag_symbols(runs), "size": 9},
                    hovertext=_flags(runs),
                )
            )
    figure.update_layout(
        xaxis_title="batch size",
        yaxis_title="latency (ms)",
        legend_title="percentile · run",
        margin={"t": 30, "b": 10},
        height=420,
    )
    figure.update_xaxes(type="category")
    return figure


def throughput_by_batch(wide: pd.DataFrame) -> go.Figure:
    figure = go.Figure()
    for job_id, runs in wide.groupby("job_id", sort=False):
        runs = runs.sort_values("batch_size")
        figure.add_trace(
            go.Bar(
                x=runs["batch_size"].astype(str),
                y=runs["throughput"],
                name=f"job {job_id} · {runs['model_name'].iloc[0]}",
            )
        )
    figure.update_layout(
        xaxis_title="batch size",
        yaxis_title="throughput (inferences/s)",
        barmode="group",
        margin={"t": 30, "b": 10},
        height=360,
    )
    return figure


def op_histogram(histogram: dict[str, int], *, top: int = 20) -> go.Figure:
    items = sorted(histogram.items(), key=lambda kv: kv[1], reverse=True)[:top]
    figure = go.Figure(go.Bar(x=[v for _, v in items], y=[k for k, _ in items], orientation="h"))
    figure.update_layout(
        xaxis_title="nodes",
        yaxis={"autorange": "reversed"},
        height=max(200, 24 * len(items)),
        margin={"t": 10, "b": 10},
    )
    return figure


def _flags(runs: pd.DataFrame) -> list[str]:
    """Per point: 'unstable', 'contended', both, or '' (shown on hover)."""
    unstable = runs.get("stable", pd.Series(1.0, index=runs.index)) < 0.5
    contended = runs.get("contended", pd.Series(0.0, index=runs.index)) >= 0.5
    return [
        ", ".join(word for word, on in (("unstable", u), ("contended", c)) if on)
        for u, c in zip(unstable, contended, strict=True)
    ]


def _flag_symbols(runs: pd.DataFrame) -> list[str]:
    """Flagged points are drawn as open diamonds so they stand out from trustworthy ones."""
    return ["diamond-open" if flag else "circle" for flag in _flags(runs)]


def _spread(runs: pd.DataFrame) -> dict[str, Any] | None:
    if "p10_ms" not in runs or "p90_ms" not in runs:
        return None
    return {
        "type": "data",
        "symmetric": False,
        "array": (runs["p90_ms"] - runs["p50_ms"]).tolist(),
        "arrayminus": (runs["p50_ms"] - runs["p10_ms"]).tolist(),
    }


def ratio_intervals(rows: list[dict[str, Any]]) -> go.Figure:
    """Each comparison's B/A ratio with its interval; the band around 1 is the margin."""
    labels = [f"job {r['job']}: {r['B']} vs {r['A']}" for r in rows]
    figure = go.Figure(
        go.Scatter(
            x=[r["ratio"] for r in rows],
            y=labels,
            mode="markers",
            marker={"size": 10, "color": [VERDICT_COLOURS.get(r["verdict"], "grey") for r in rows]},
            error_x={
                "type": "data",
                "symmetric": False,
                "array": [r["high"] - r["ratio"] for r in rows],
                "arrayminus": [r["ratio"] - r["low"] for r in rows],
            },
            hovertext=[r["sentence"] for r in rows],
            hoverinfo="text",
        )
    )
    margin = max((r.get("margin") or 0.0 for r in rows), default=0.0)
    if margin:
        figure.add_vrect(
            x0=1 - margin,
            x1=1 + margin,
            fillcolor="lightgrey",
            opacity=0.4,
            line_width=0,
            annotation_text="no meaningful difference",
        )
    figure.add_vline(x=1.0, line_dash="dash", line_color="black")
    figure.update_layout(
        xaxis_title="latency of B / latency of A  (< 1: B is faster)",
        yaxis={"autorange": "reversed"},
        height=max(220, 60 * len(rows) + 100),
        margin={"t": 30, "b": 10},
    )
    return figure


VERDICT_COLOURS = {"faster": "#2e7d32", "slower": "#c62828", "no significant difference": "#616161"}


def speed_vs_accuracy(variants: list[dict[str, Any]]) -> go.Figure:
    """Speedup over the original against output cosine; the chosen variant is a star."""
    rows = [v for v in variants if v.get("speedup") and v.get("mean cosine") is not None]
    figure = go.Figure(
        go.Scatter(
            x=[v["speedup"] for v in rows],
            y=[v["mean cosine"] for v in rows],
            mode="markers+text",
            text=[v["recipe"] for v in rows],
            textposition="top center",
            marker={
                "size": [16 if v["chosen"] else 10 for v in rows],
                "symbol": ["star" if v["chosen"] else "circle" for v in rows],
                "color": ["#2e7d32" if v["within budget"] else "#c62828" for v in rows],
            },
        )
    )
    figure.add_vline(x=1.0, line_dash="dash", line_color="black")
    figure.update_layout(
        xaxis_title="speedup over the original (x)",
        yaxis_title="mean output cosine to the original",
        height=360,
        margin={"t": 30, "b": 10},
    )
    return figure


def targets_bar(table: pd.DataFrame, latency_column: str) -> go.Figure:
    """p50 latency and best throughput of each backend · device · precision, side by side."""
    ok = ["DISAGREE" not in str(v) for v in table["outputs vs ORT FP32 CPU"]]
    figure = go.Figure(
        go.Bar(
            x=table["target"],
            y=table[latency_column],
            marker_color=["#4C78A8" if good else "#E45756" for good in ok],
            text=[f"{v:.3f} ms" for v in table[latency_column]],
            hovertext=table["outputs vs ORT FP32 CPU"],
            name=latency_column,
        )
    )
    figure.update_layout(
        yaxis_title=latency_column,
        margin={"t": 30, "b": 10},
        height=340,
        title="Lower is faster · red: outputs disagree with the reference",
    )
    return figure
