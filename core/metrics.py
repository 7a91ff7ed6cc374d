"""The one table of metrics: unit, label and which direction is better.

Pages, comparisons and exports read direction and units from here, never from operator
overloading or column names.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    name: str
    label: str
    unit: str
    higher_is_better: bool | None
    """None for descriptive figures (sample counts, flags) that have no better direction."""


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("p10_ms", "p10 latency", "ms", False),
        Metric("p50_ms", "p50 latency", "ms", False),
        Metric("p90_ms", "p90 latency", "ms", False),
        Metric("p95_ms", "p95 latency", "ms", False),
        Metric("p99_ms", "p99 latency", "ms", False),
        Metric("mean_ms", "mean latency", "ms", False),
        Metric("std_ms", "latency std", "ms", False),
        Metric("min_ms", "min latency", "ms", False),
        Metric("max_ms", "max latency", "ms", False),
        Metric("cv", "coefficient of variation", "", False),
        Metric("throughput", "throughput", "inf/s", True),
        Metric("samples", "timed runs", "", None),
        Metric("duration_s", "measured time", "s", None),
        Metric("window_spread", "spread of window p50s", "", False),
        Metric("stable", "stable (1) / unstable (0)", "", None),
        Metric("peak_rss_mb", "peak RSS", "MiB", False),
        Metric("model_rss_mb", "RSS added by loading", "MiB", False),
        Metric("other_cores", "CPU used by other processes", "cores", False),
        Metric("contended", "contended (1) / quiet (0)", "", None),
        Metric("steal_share", "CPU steal", "", False),
        # accuracy of a variant against its original (the original itself is the reference)
        Metric("mean_cosine", "mean cosine vs original", "", True),
        Metric("cosine_error", "error vs original (1 − mean cosine)", "", False),
        Metric("max_abs_error", "max abs error vs original", "", False),
        Metric("top1_agreement", "top-1 agreement with original", "", True),
        Metric("top1_drop", "top-1 accuracy drop", "", False),
        # a video run (optistudio.core.video): frames of N streams batched across streams
        Metric("streams", "video streams", "", None),
        Metric("stream_fps", "fps per stream (mean)", "fps", True),
        Metric("stream_fps_min", "fps of the slowest stream", "fps", True),
        Metric("dropped", "frames dropped", "frames", False),
        Metric("realtime_streams", "real-time streams held", "streams", True),
        Metric("speedup_vs_per_frame", "speedup over per-frame inference", "x", True),
        Metric("decode_cpu_share", "decode share of CPU", "", None),
        # an optimize variant as its job timed it, interleaved with its original
        Metric("speedup_vs_original", "speedup over its original (same run)", "x", True),
        # a decoder with a KV cache, timed by decoding (optistudio.core.llm)
        Metric("tokens_per_s", "decoding speed", "tokens/s", True),
        Metric("ttft_ms", "time to first token", "ms", False),
        Metric("ms_per_token_p50", "time per token p50", "ms", False),
        Metric("ms_per_token_p99", "time per token p99", "ms", False),
        Metric("size_mb", "size on disk", "MB", False),
        Metric("size_vs_fp32", "size vs the FP32 file", "x", False),
    )
}


def unit_of(name: str) -> str:
    return METRICS[name].unit if name in METRICS else ""


def direction(name: str) -> str:
    """'lower is better', 'higher is better' or '' (descriptive), from the table."""
    better = METRICS[name].higher_is_better if name in METRICS else None
    return "" if better is None else ("higher is better" if better else "lower is better")


def is_better(name: str, value: float, other: float) -> bool:
    """Whether `value` is strictly better than `other` for this metric (needs a direction)."""
    better = METRICS[name].higher_is_better
    if better is None:
        raise ValueError(f"metric {name!r} has no better direction")
    return value > other if better else value < other
