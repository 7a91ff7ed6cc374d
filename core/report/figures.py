"""Plotly figures of a comparison snapshot: Pareto view, throughput vs p99, latency spread.

Used by the studio page, the shared page and the self-contained HTML report alike. The Pareto
view plots the snapshot's own axes (any latency against any accuracy metric, a task's included),
each titled with its label, unit and which way is better.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.colors import qualitative

from optistudio.core.report.figure_text import figure_text
from optistudio.core.report.labels import legend_labels, shared_parts
from optistudio.core.report.metric_info import axis_title, label_of
from optistudio.core.report.pareto import pareto_front
from optistudio.core.report.snapshot import CompareSnapshot, ResultRow

MAX_BOXES = 40
"""Latency distributions drawn at most; more boxes than this are unreadable."""
FRONTIER_COLOR, SWEET_COLOR = "#d62728", "#2ca02c"
PALETTE = qualitative.Plotly
"""Row colours, in the snapshot's order."""


MARGIN = {"l": 60, "r": 20, "t": 30, "b": 50}
"""Room for tick labels and an axis title (Plotly cuts off what falls outside the margins);
each axis's automargin grows it for longer labels."""


def _layout(figure: go.Figure, x: str, y: str, shared: str = "") -> go.Figure:
    """Axis titles, and the legend titled with what every point shares ('all: tiny ·
    onnxruntime · fp32 · batch 1 · default threads'), so its entries name only differences."""
    title = {"text": f"all: {shared}" if shared else "", "side": "top"}
    figure.update_layout(
        xaxis_title=x, yaxis_title=y, height=440, margin=MARGIN, legend={"title": title}
    )
    return _room_for_labels(figure)


def _room_for_labels(figure: go.Figure) -> go.Figure:
    figure.update_xaxes(automargin=True)
    figure.update_yaxes(automargin=True)
    return figure


def _xy(snapshot: CompareSnapshot, x: str, y: str) -> list[tuple[int, float, float]]:
    points = []
    for i, row in enumerate(snapshot.rows):
        vx, vy = snapshot.value(row, x), snapshot.value(row, y)
        if vx is not None and vy is not None:
            points.append((i, vx, vy))
    return points


def _marker(
    snapshot: CompareSnapshot,
    point: tuple[int, float, float],
    axes: tuple[str, str],
    name: str,
    on_front: bool,
) -> go.Scatter:
    """One result as its own legend entry: no text beside the point (labels of close points
    overlap into unreadable text), its name in the legend and its full label on hover, the
    figures as the table reads them ('identical' for float rounding, not 1.055e-14)."""
    row = snapshot.rows[point[0]]
    marker: dict[str, object] = {"size": 11, "color": row_color(point[0])}
    if on_front:
        marker |= {"symbol": "diamond", "line": {"color": FRONTIER_COLOR, "width": 2}}
    figures = ", ".join(
        f"{label_of(axis)}: {figure_text(axis, value)}"
        for axis, value in zip(axes, point[1:], strict=True)
    )
    front = " · on the Pareto frontier" if on_front else ""
    return go.Scatter(
        x=[point[1]],
        y=[point[2]],
        name=name,
        mode="markers",
        marker=marker,
        hovertext=[f"{row.label}{front}<br>{figures}"],
        hovertemplate="%{hovertext}<extra></extra>",
        cliponaxis=False,
    )


def row_color(index: int) -> str:
    """The colour of the snapshot's row `index` in every chart, so a result reads alike in each
    (a trace's default colour follows its position, which the frontier line shifts)."""
    return PALETTE[index % len(PALETTE)]


def legend_names(snapshot: CompareSnapshot) -> list[str]:
    """Each row's legend entry: its job and what sets it apart from the other rows
    (`labels.legend_labels`); what they share titles the legend."""
    return legend_labels(snapshot.rows)


def frontier_figure(snapshot: CompareSnapshot, x: str, y: str) -> go.Figure:
    """Every result as a point named in the legend, the Pareto frontier of (x, y) as a line
    through its points (diamonds); hover gives each point's full label."""
    points = _xy(snapshot, x, y)
    if (x, y) == (snapshot.latency_metric, snapshot.quality_metric):
        front = set(snapshot.frontier())  # empty where the stored axes cannot rank here
    else:
        front = set(pareto_front(snapshot.points(), [x, y], snapshot.noises()))
    on = sorted((p for p in points if p[0] in front), key=lambda p: (p[1], p[2]))
    figure = go.Figure()
    if len(on) > 1:
        figure.add_trace(
            go.Scatter(
                x=[p[1] for p in on],
                y=[p[2] for p in on],
                name="Pareto frontier",
                mode="lines",
                line={"color": FRONTIER_COLOR},
                hoverinfo="skip",
            )
        )
    names = legend_names(snapshot)
    for point in points:
        figure.add_trace(_marker(snapshot, point, (x, y), names[point[0]], point[0] in front))
    return _layout(figure, axis_title(x), axis_title(y), shared_parts(snapshot.rows))


def pareto_figure(snapshot: CompareSnapshot) -> go.Figure:
    """The snapshot's accuracy axis against its latency axis (error vs the original against p50
    unless chosen otherwise); the budget shaded and the sweet spot starred."""
    x, y = snapshot.latency_metric, snapshot.quality_metric
    figure = frontier_figure(snapshot, x, y)
    if snapshot.budget_ms is not None:
        figure.add_vrect(
            x0=0, x1=snapshot.budget_ms, fillcolor=SWEET_COLOR, opacity=0.08, line_width=0
        )
        figure.add_vline(
            x=snapshot.budget_ms,
            line_dash="dash",
            line_color=SWEET_COLOR,
            annotation_text=f"budget {snapshot.budget_ms:g} ms",
        )
    sweet = snapshot.sweet_spot()
    if sweet is not None:
        point = [p for p in _xy(snapshot, x, y) if p[0] == sweet]
        star = {"symbol": "star", "size": 20, "color": SWEET_COLOR}
        figure.add_trace(
            go.Scatter(
                x=[p[1] for p in point],
                y=[p[2] for p in point],
                name=f"sweet spot: {legend_names(snapshot)[sweet]}",
                mode="markers",
                marker=star,
                hovertext=[snapshot.rows[sweet].label],
                hovertemplate="%{hovertext}<extra>sweet spot</extra>",
            )
        )
    if not _xy(snapshot, x, y):
        missing = f"No selected result has both {label_of(x)} and {label_of(y)}"
        figure.add_annotation(text=missing, showarrow=False)
    return figure


def throughput_figure(snapshot: CompareSnapshot) -> go.Figure:
    """Throughput against p99 latency, with the frontier of the two highlighted."""
    return frontier_figure(snapshot, "p99_ms", "throughput")


def _box(row: ResultRow, values: dict[str, float | None], color: str) -> go.Box | None:
    p10, p50, p90, p99 = (values.get(k) for k in ("p10_ms", "p50_ms", "p90_ms", "p99_ms"))
    if None in (p10, p50, p90, p99):
        return None
    low = values.get("min_ms") or p10
    return go.Box(
        name=row.label,
        y=[row.label],  # its own labelled row: without a position every box sits on one row
        q1=[p10],
        median=[p50],
        q3=[p90],
        lowerfence=[low],
        upperfence=[p99],
        mean=[values.get("mean_ms") or p50],
        orientation="h",
        showlegend=False,
        marker_color=color,
    )


def distribution_figure(snapshot: CompareSnapshot) -> go.Figure:
    """Latency spread per result from its stored percentiles: box p10-p90, whiskers min-p99."""
    figure = go.Figure()
    for i, row in enumerate(snapshot.rows[:MAX_BOXES]):
        box = _box(row, {k: snapshot.value(row, k) for k in row.metrics}, row_color(i))
        if box is not None:
            figure.add_trace(box)
    if not figure.data:
        figure.add_annotation(
            text="No selected result has stored percentiles (an optimize variant keeps its "
            "p50 only: benchmark it for its spread)",
            showarrow=False,
        )
    figure.update_layout(
        xaxis_title="latency (ms)",
        yaxis={"type": "category", "autorange": "reversed"},  # in the table's order
        height=max(260, 34 * min(len(snapshot.rows), MAX_BOXES) + 80),
        margin=MARGIN,
    )
    return _room_for_labels(figure)
