"""The Batching page's charts for a decoder: its measured decode profile, and predicted tokens/s
and p99 time per token against the arrival rate for static and continuous batching."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from optistudio.core.llm.serving_whatif import DecodeProfile
from optistudio.studio.charts import batch_axis, log_axis, readable

COLOURS = {"static": "#e6550d", "continuous": "#3182bd"}
RATE_AXIS = "arrival rate (requests/s)"
TOKENS_AXIS = "tokens/s (all requests together)"
TPOT_AXIS = "p99 time per token (ms)"


def decode_profile_figure(profile: DecodeProfile) -> go.Figure:
    """Milliseconds per decoding step (bars) and tokens/s (line) per measured batch size."""
    labels = [str(b) for b in profile.batch_sizes]
    speeds = [profile.tokens_per_s(b) for b in profile.batch_sizes]
    figure = make_subplots(specs=[[{"secondary_y": True}]])
    figure.add_bar(x=labels, y=profile.step_ms, name="ms per step", marker_color="#9ecae1")
    figure.add_scatter(x=labels, y=speeds, name="tokens/s", secondary_y=True)
    figure.update_xaxes(batch_axis(profile.batch_sizes) | {"title": "live rows per step"})
    figure.update_yaxes(title="ms per decoding step", secondary_y=False)
    figure.update_yaxes(title="tokens/s (rows / step time)", secondary_y=True)
    figure.update_layout(
        title=f"Measured decode steps (after {profile.step_prompt_tokens} prompt tokens)",
        height=340,
    )
    return readable(figure).update_layout(margin={"t": 60})


def decoder_sweep_figure(frame: pd.DataFrame, rate: float, ceiling: float) -> go.Figure:
    """Predicted tokens/s (solid) and p99 time per token (dashed, right axis) against the
    arrival rate, one colour per batching policy; saturated points (the queue keeps growing)
    drawn as crosses, the continuous ceiling and the chosen rate marked."""
    figure = make_subplots(specs=[[{"secondary_y": True}]])
    for batching, rows in frame.groupby("batching", sort=False):
        symbols = ["x" if s else "circle" for s in rows["saturated"]]
        line = {"color": COLOURS.get(str(batching))}
        figure.add_scatter(
            x=rows["rate"],
            y=rows["tokens_per_s"],
            name=f"{batching}: tokens/s",
            mode="lines+markers",
            marker={"symbol": symbols, "size": 8},
            line=line,
        )
        figure.add_scatter(
            x=rows["rate"],
            y=rows["tpot_p99_ms"],
            name=f"{batching}: p99 time per token (ms)",
            mode="lines+markers",
            marker={"symbol": symbols, "size": 7},
            line=line | {"dash": "dash"},
            secondary_y=True,
        )
    figure.add_hline(
        y=ceiling,
        line_dash="dot",
        line_color="#888",
        annotation_text="continuous ceiling",
        annotation_position="top left",
    )
    figure.add_vline(x=rate, line_dash="dash", line_color="#888", annotation_text="rate")
    figure.update_xaxes(title=RATE_AXIS)
    figure.update_yaxes(title=TOKENS_AXIS, secondary_y=False, rangemode="tozero")
    figure.update_yaxes(title=TPOT_AXIS, secondary_y=True, **log_axis(frame["tpot_p99_ms"]))
    figure.update_layout(
        title="Predicted, by arrival rate (crosses: the queue keeps growing)", height=380
    )
    return readable(figure).update_layout(margin={"t": 60})
