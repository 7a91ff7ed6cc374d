"""Plotly figures for the studio, built from plain data frames, and the axis rules they share.

Batch sizes are settings, not a quantity: they go on a category axis in numeric order. A log
axis gets its ticks spelled out (1, 2, 5, 10, 20, ...): Plotly's own labels on a log axis are
mantissa digits ("3, 5, 8, 1, 2" going up). Plotly draws axis titles and tick labels in the
margins and cuts off what does not fit, so every figure goes through `readable`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

PERCENTILE_COLUMNS = (("p50_ms", "p50"), ("p90_ms", "p90"), ("p99_ms", "p99"))
MARGIN = {"l": 60, "r": 20, "t": 40, "b": 50}
"""Room for a line of tick labels and an axis title; automargin grows it for longer labels."""
LOG_STEPS = ((1.0, 2.0, 5.0), (1.0, 2.0, 3.0, 5.0), (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0))
"""Tick mantissas per decade, coarsest first; the first that puts 3 ticks on the data wins."""


def readable(figure: go.Figure) -> go.Figure:
    """Every axis makes room for its title and tick labels."""
    figure.update_xaxes(automargin=True)
    figure.update_yaxes(automargin=True)
    figure.update_layout(margin=MARGIN)
    return figure


def batch_axis(sizes: Iterable[Any]) -> dict[str, Any]:
    """A category axis of batch sizes in numeric order (give x as `str(size)`)."""
    order = sorted({int(size) for size in sizes})
    return {
        "type": "category",
        "categoryorder": "array",
        "categoryarray": [str(size) for size in order],
        "title": "batch size",
    }


def log_axis(values: Iterable[float]) -> dict[str, Any]:
    """A log axis whose tick labels are plain numbers in ascending order."""
    ticks = log_ticks(values)
    if not ticks:  # nothing to place them by: Plotly's own (an empty list would mean none)
        return {"type": "log"}
    return {"type": "log", "tickvals": ticks, "ticktext": [f"{t:g}" for t in ticks]}


def log_ticks(values: Iterable[float]) -> list[float]:
    """Ticks over the data: 1-2-5 per decade, finer when the data span little, and evenly
    spaced round numbers for data too close together for three such ticks."""
    data = [float(v) for v in values if v is not None and np.isfinite(v) and v > 0]
    if not data:
        return []
    low, high = min(data), max(data)
    decades = range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1)
    for steps in LOG_STEPS:
        ticks = [_round(m * 10.0**e) for e in decades for m in steps]
        if sum(low <= t <= high for t in ticks) >= 3:
            return _around(ticks, low, high)
    return _even_ticks(low, high)


def _around(ticks: list[float], low: float, high: float) -> list[float]:
    """The ticks on [low, high] and one either side (the axis pads its range a little)."""
    inside = [i for i, t in enumerate(ticks) if low <= t <= high]
    return ticks[max(inside[0] - 1, 0) : inside[-1] + 2]


def _even_ticks(low: float, high: float) -> list[float]:
    """About five round, evenly spaced ticks from just below `low` to just above `high`."""
    span = (high - low) or high
    base = 10.0 ** math.floor(math.log10(span / 5))
    step = next(base * f for f in (1, 2, 5, 10) if span / (base * f) <= 5)
    first, last = math.floor(low / step), math.ceil(high / step)
    return [_round(i * step) for i in range(first, last + 1) if i > 0]


def _round(value: float) -> float:
    """Drop float noise (0.30000000000000004 -> 0.3) so the label reads as the tick's value."""
    return float(f"{value:.6g}")


def run_name(job_id: object, runs: pd.DataFrame) -> str:
    """A run in a legend: 'job 3 · model · openvino · cpu · bf16' (the columns it has)."""
    first = runs.iloc[0]
    parts = [f"job {job_id}", str(first["model_name"]), str(first["backend"])]
    parts += [str(first[c]) for c in ("device", "precision") if c in runs and first[c]]
    return " · ".join(parts)


CHART_RUNS = 12
"""Runs drawn in the per-batch charts: past a dozen, lines and legend entries are unreadable."""


def latest_runs(wide: pd.DataFrame, count: int = CHART_RUNS) -> pd.DataFrame:
    """The rows of the newest `count` jobs of the wide results frame (what the charts draw)."""
    newest = sorted({int(job) for job in wide["job_id"]}, reverse=True)[:count]
    return wide[wide["job_id"].isin(newest)]


def latency_by_batch(wide: pd.DataFrame) -> go.Figure:
    """Latency percentiles per batch size, one line per (job, percentile); p50 has p10-p90 bars."""
    figure = go.Figure()
    for job_id, runs in wide.groupby("job_id", sort=False):
        runs = runs.sort_values("batch_size")
        name = run_name(job_id, runs)
        for column, label in PERCENTILE_COLUMNS:
            if column not in runs:
                continue
            figure.add_trace(
                go.Scatter(
                    x=runs["batch_size"].astype(int).astype(str),
                    y=runs[column],
                    mode="lines+markers",
                    name=f"{label} · {name}",
                    error_y=_spread(runs) if column == "p50_ms" else None,
                    marker={"symbol": _flag_symbols(runs), "size": 9},
                    hovertext=_flags(runs),
                )
            )
    figure.update_layout(
        xaxis=batch_axis(wide["batch_size"]),
        yaxis_title="latency (ms)",
        legend_title="percentile · run",
        height=420,
    )
    return readable(figure)


def throughput_by_batch(wide: pd.DataFrame) -> go.Figure:
    figure = go.Figure()
    for job_id, runs in wide.groupby("job_id", sort=False):
        runs = runs.sort_values("batch_size")
        figure.add_trace(
            go.Bar(
                x=runs["batch_size"].astype(int).astype(str),
                y=runs["throughput"],
                name=run_name(job_id, runs),
            )
        )
    figure.update_layout(
        xaxis=batch_axis(wide["batch_size"]),
        yaxis_title="throughput (inferences/s)",
        barmode="group",
        height=360,
    )
    return readable(figure)


def op_histogram(histogram: dict[str, int], *, top: int = 20) -> go.Figure:
    items = sorted(histogram.items(), key=lambda kv: kv[1], reverse=True)[:top]
    figure = go.Figure(go.Bar(x=[v for _, v in items], y=[k for k, _ in items], orientation="h"))
    figure.update_layout(
        xaxis_title="nodes",
        yaxis={"autorange": "reversed"},
        height=max(200, 24 * len(items) + 60),
    )
    return readable(figure)


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
    """Each comparison's B/A ratio with its interval; the band around 1 is the margin. A row
    is named by its job, both models and how they ran ('onnxruntime fp32 · batch 1 · default
    threads'), so two runs of the same pair on other settings never read alike."""
    labels = [
        f"job {r['job']}: {r['B']} vs {r['A']}" + (f" ({r['runs']})" if r.get("runs") else "")
        for r in rows
    ]
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
    )
    return readable(figure)


VERDICT_COLOURS = {"faster": "#2e7d32", "slower": "#c62828", "no significant difference": "#616161"}


LABEL_GAP = 0.12
"""Points closer than this (as a share of each axis's span) would print their labels over each
other: such points are named by the legend and on hover, not by a label beside them."""


def accuracy_points(variants: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The variants the speedup/accuracy chart can place: timed (a speedup) and judged (a
    cosine). Empty for a run that made none: the page says so instead of drawing empty axes."""
    return [v for v in variants if v.get("speedup") and v.get("mean cosine") is not None]


def speed_vs_accuracy(variants: list[dict[str, Any]]) -> go.Figure:
    """Speedup over the original against output cosine; the chosen variant is a star.

    One trace per variant, so the legend names every point; a label is printed beside a point
    only when no other point is near it (`LABEL_GAP`), so labels never overlap."""
    rows = accuracy_points(variants)
    alone = isolated([(v["speedup"], v["mean cosine"]) for v in rows])
    figure = go.Figure(
        [
            go.Scatter(
                x=[v["speedup"]],
                y=[v["mean cosine"]],
                name=str(v["recipe"]),
                mode="markers+text" if apart else "markers",
                text=[v["recipe"]] if apart else None,
                textposition="top center",
                cliponaxis=False,  # a label above the top point stays whole
                marker={
                    "size": 16 if v["chosen"] else 11,
                    "symbol": "star" if v["chosen"] else "circle",
                    "color": "#2e7d32" if v["within budget"] else "#c62828",
                },
                hovertemplate=f"{v['recipe']}: %{{x:.2f}}x, cosine %{{y:.5f}}<extra></extra>",
            )
            for v, apart in zip(rows, alone, strict=True)
        ]
    )
    figure.add_vline(x=1.0, line_dash="dash", line_color="black")
    figure.update_layout(
        xaxis_title="speedup over the original (x)",
        yaxis_title="mean output cosine to the original",
        legend_title="variant (green: within budget)",
        height=360,
    )
    return readable(figure)


def isolated(points: list[tuple[float, float]], gap: float = LABEL_GAP) -> list[bool]:
    """Per point: whether every other point is at least `gap` away from it on some axis, the
    distance taken as a share of that axis's span (on an axis where all points have one value,
    they are all near)."""
    if not points:
        return []
    spans = [max(values) - min(values) for values in zip(*points, strict=True)]

    def near(a: tuple[float, float], b: tuple[float, float]) -> bool:
        pairs = zip(a, b, spans, strict=True)
        return all(span == 0 or abs(p - q) / span < gap for p, q, span in pairs)

    return [
        not any(near(point, other) for j, other in enumerate(points) if j != i)
        for i, point in enumerate(points)
    ]


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
        height=340,
        title="Lower is faster · red: outputs disagree with the reference",
    )
    readable(figure).update_layout(margin={"t": 60})  # the title sits in the top margin
    return figure


def stream_bars(streams: pd.DataFrame, frame_rate: float | None = None) -> go.Figure:
    """Per video stream: fps beside its frame rate (the real-time line), and latency p50/p99.

    `streams` has the columns stream, fps, p50_ms, p99_ms, dropped (one row per stream)."""
    labels = [f"stream {int(index)}" for index in streams["stream"]]
    figure = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("frames per second", "latency from frame due to result"),
        horizontal_spacing=0.12,
    )
    figure.add_trace(
        go.Bar(
            x=labels,
            y=streams["fps"],
            name="fps",
            text=[f"{fps:.1f}" for fps in streams["fps"]],
            customdata=streams["dropped"],
            hovertemplate="%{x}: %{y:.1f} fps, %{customdata} dropped<extra></extra>",
        ),
        row=1,
        col=1,
    )
    if frame_rate:
        figure.add_hline(
            y=frame_rate,
            line_dash="dash",
            annotation_text=f"real time: {frame_rate:g} fps",
            row=1,
            col=1,
        )
    for column, label in (("p50_ms", "p50"), ("p99_ms", "p99")):
        figure.add_trace(go.Bar(x=labels, y=streams[column], name=f"latency {label}"), row=1, col=2)
    figure.update_yaxes(title_text="fps", row=1, col=1, rangemode="tozero")
    figure.update_yaxes(title_text="latency (ms)", row=1, col=2, rangemode="tozero")
    figure.update_xaxes(title_text="stream", type="category")
    figure.update_layout(barmode="group", height=380, legend_title="figure")
    return readable(figure)
