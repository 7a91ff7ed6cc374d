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


def _spread(runs: pd.DataFrame) -> dict[str, Any] | None:
    if "p10_ms" not in runs or "p90_ms" not in runs:
        return None
    return {
        "type": "data",
        "symmetric": False,
        "array": (runs["p90_ms"] - runs["p50_ms"]).tolist(),
        "arrayminus": (runs["p50_ms"] - runs["p10_ms"]).tolist(),
    }
