"""The Batching page's charts: the measured profile, the prediction by arrival rate, a Verify
beside its prediction, how the refits converge, and every setting the tuner tried."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.tuner import Candidate, Recommendation, setting_line
from optistudio.services.jobresults import RequestSamples
from optistudio.studio.charts import batch_axis, log_axis, readable

LABEL_BOX = (0.14, 0.07)
"""A point label's room on the settings chart, as shares of its width (log p99) and height."""


def profile_figure(profile: LatencyProfile) -> go.Figure:
    """Latency (bars) and throughput b / latency(b) (line) per measured batch size."""
    sizes = profile.batch_sizes
    throughput = [b / ms * 1000 for b, ms in zip(sizes, profile.mean_ms, strict=True)]
    labels = [str(b) for b in sizes]
    figure = make_subplots(specs=[[{"secondary_y": True}]])
    figure.add_bar(x=labels, y=profile.mean_ms, name="latency (ms)", marker_color="#9ecae1")
    figure.add_scatter(x=labels, y=throughput, name="throughput (req/s)", secondary_y=True)
    figure.update_xaxes(batch_axis(sizes))
    figure.update_yaxes(title="ms per batch", secondary_y=False)
    figure.update_yaxes(title="requests / s", secondary_y=True)
    figure.update_layout(title="Measured profile", height=340)
    return _titled(figure)


def sweep_figure(frame: pd.DataFrame, rate: float | None) -> go.Figure:
    """Predicted throughput and p50/p99 against the arrival rate, the chosen rate marked."""
    figure = make_subplots(specs=[[{"secondary_y": True}]])
    figure.add_scatter(x=frame["rate"], y=frame["throughput"], name="throughput (req/s)")
    for column, dash in (("p50_ms", "dot"), ("p99_ms", "solid")):
        figure.add_scatter(
            x=frame["rate"],
            y=frame[column],
            name=column.replace("_ms", " (ms)"),
            line={"dash": dash},
            error_y=_error_bars(frame, column),
            secondary_y=True,
        )
    if rate:
        figure.add_vline(x=rate, line_dash="dash", line_color="#888", annotation_text="rate")
    figure.update_xaxes(title="arrival rate (req/s)")
    figure.update_yaxes(title="requests / s", secondary_y=False)
    bands = [frame[c] for c in ("p50_low_ms", "p99_high_ms") if c in frame]
    latency = log_axis([*frame["p50_ms"], *frame["p99_ms"], *(v for c in bands for v in c)])
    figure.update_yaxes(title="latency (ms)", secondary_y=True, **latency)
    figure.update_layout(title="Predicted, by arrival rate", height=340)
    return _titled(figure)


def convergence_figure(frame: pd.DataFrame) -> go.Figure:
    """Predicted (with its band) and measured p99 per Verify, in order, each Verify's rate in
    its label."""
    labels = [
        f"{verify} · {rate:g}/s" if rate else verify
        for verify, rate in zip(frame["verify"], frame["rate"], strict=True)
    ]
    figure = go.Figure()
    figure.add_scatter(
        x=labels,
        y=frame["predicted_p99_ms"],
        mode="markers+lines",
        name="predicted p99 (profile before the run)",
        error_y=_error_bars(frame.rename(columns={"predicted_p99_ms": "p99_ms"}), "p99_ms"),
    )
    figure.add_scatter(
        x=labels, y=frame["measured_p99_ms"], mode="markers+lines", name="measured p99"
    )
    figure.update_xaxes(type="category", title="Verify run (rate)")
    figure.update_yaxes(
        title="p99 (ms)",
        **log_axis([*frame["predicted_p99_ms"], *frame["measured_p99_ms"], *frame["p99_high_ms"]]),
    )
    figure.update_layout(title="Convergence: predicted vs measured p99 per Verify", height=320)
    return _titled(figure)


def comparison_figure(frame: pd.DataFrame) -> go.Figure:
    """Predicted (with its band as error bars, where the frame has one) and measured latency."""
    latency = frame[frame["figure"].str.endswith("_ms")]
    figure = go.Figure()
    bars = None
    if "low" in latency and latency["low"].notna().any():
        bars = {
            "type": "data",
            "symmetric": False,
            "array": (latency["high"] - latency["predicted"]).clip(lower=0).fillna(0).tolist(),
            "arrayminus": (latency["predicted"] - latency["low"]).clip(lower=0).fillna(0).tolist(),
        }
    figure.add_bar(x=latency["figure"], y=latency["predicted"], name="predicted", error_y=bars)
    figure.add_bar(x=latency["figure"], y=latency["measured"], name="measured")
    figure.update_layout(
        title="Predicted vs measured latency", yaxis_title="ms", barmode="group", height=320
    )
    return _titled(figure)


def timeline_figure(requests: RequestSamples) -> go.Figure:
    """Each measured request over the run: queue wait and compute stacked."""
    figure = go.Figure()
    sent = [t / 1000 for t in requests.sent_ms]
    figure.add_scatter(x=sent, y=requests.queue_ms, mode="markers", name="queue wait (ms)")
    figure.add_scatter(x=sent, y=requests.latency_ms, mode="markers", name="total (ms)")
    figure.update_layout(
        title="Measured requests", xaxis_title="sent at (s)", yaxis_title="ms", height=320
    )
    figure.update_traces(marker={"size": 4, "opacity": 0.6})
    return _titled(figure)


def candidates_figure(advice: Recommendation) -> go.Figure:
    """Every setting tried: throughput against p99; those that meet the budget with the speed
    margin in green, those that meet it only at the profiled speed in orange, the pick ringed.
    Every point has its setting in its hover, and on the chart where the label has room (the pick
    first, then those that meet the budget, lowest p99 first): at a fixed rate most settings
    reach the same throughput, and their labels would print over each other."""
    labelled = _spaced(advice.candidates, advice.settings)
    figure = go.Figure()
    groups = {
        "meets the budget": ([c for c in advice.candidates if c.feasible], "#2ca02c"),
        f"only at the profiled speed (not {advice.margin:.0%} slower)": (
            [c for c in advice.candidates if c.p99_slower_ms is not None and not c.feasible],
            "#ff7f0e",
        ),
        "misses it": (
            [c for c in advice.candidates if c.p99_slower_ms is None and not c.feasible],
            "#bbbbbb",
        ),
    }
    for name, (chosen, colour) in groups.items():
        if not chosen:
            continue
        figure.add_scatter(
            x=[c.predicted.p99_ms for c in chosen],
            y=[c.predicted.throughput for c in chosen],
            mode="markers+text",
            marker={"color": colour, "size": 9},
            name=name,
            text=[_candidate_label(c) if id(c) in labelled else "" for c in chosen],
            textposition="top center",
            textfont={"size": 9},
            cliponaxis=False,
            hovertext=[_candidate_text(c, advice.margin) for c in chosen],
            hoverinfo="text",
        )
    figure.add_scatter(
        x=[advice.predicted.p99_ms],
        y=[advice.predicted.throughput],
        mode="markers",
        marker={"size": 18, "symbol": "circle-open", "color": "#d62728", "line": {"width": 3}},
        name="recommended",
        hovertext=[f"recommended: {_candidate_label(advice.settings)}"],
        hoverinfo="text",
    )
    figure.update_layout(
        title="Settings tried (label: max batch size · timeout ×instances)",
        xaxis_title="p99 (ms)",
        yaxis_title="throughput (req/s)",
        height=400,
    )
    figure.update_xaxes(log_axis(c.predicted.p99_ms for c in advice.candidates))
    return _titled(figure)


def _spaced(candidates: list[Candidate], pick: BatchingSettings) -> set[int]:
    """The ids of the candidates whose label fits without covering one placed before it."""
    x = np.log10([c.predicted.p99_ms for c in candidates])
    y = np.array([c.predicted.throughput for c in candidates])
    x, y = (x - x.min()) / (np.ptp(x) or 1.0), (y - y.min()) / (np.ptp(y) or 1.0)
    order = sorted(
        range(len(candidates)),
        key=lambda i: (not _same_setting(candidates[i], pick), not candidates[i].feasible, x[i]),
    )
    placed: list[int] = []
    for i in order:
        if all(
            abs(x[i] - x[j]) >= LABEL_BOX[0] or abs(y[i] - y[j]) >= LABEL_BOX[1] for j in placed
        ):
            placed.append(i)
    return {id(candidates[i]) for i in placed}


def _same_setting(candidate: Candidate, settings: BatchingSettings) -> bool:
    same_size = candidate.max_batch_size == settings.max_batch_size
    same = same_size and candidate.instances == settings.instances
    return same and candidate.timeout_ms == settings.timeout_ms


def _candidate_label(setting: Candidate | BatchingSettings) -> str:
    """A point's label: 'b8 · 2 ms' is max batch size 8 with a 2 ms timeout ('×2' after it:
    on 2 instances)."""
    label = f"b{setting.max_batch_size} · {setting.timeout_ms:g} ms"
    return label + (f" ×{setting.instances}" if setting.instances > 1 else "")


def _candidate_text(candidate: Candidate, margin: float) -> str:
    text = setting_line(candidate)
    if candidate.p99_slower_ms is not None:
        text += f"; p99 {candidate.p99_slower_ms:.1f} ms with the model {margin:.0%} slower"
    return text


def _error_bars(frame: pd.DataFrame, column: str) -> dict[str, Any] | None:
    """Plotly error bars from a figure's band columns (`p99_low_ms`, ...), None without them.
    A band need not hold its point (the point is a longer run), so a bar is never negative."""
    stem = column.removesuffix("_ms")
    low, high = f"{stem}_low_ms", f"{stem}_high_ms"
    if low not in frame or frame[low].isna().all():
        return None
    return {
        "type": "data",
        "symmetric": False,
        "array": (frame[high] - frame[column]).clip(lower=0).fillna(0).tolist(),
        "arrayminus": (frame[column] - frame[low]).clip(lower=0).fillna(0).tolist(),
    }


def _titled(figure: go.Figure) -> go.Figure:
    """Room for axis titles and labels, and for the figure's title above the plot."""
    return readable(figure).update_layout(margin={"t": 60})
