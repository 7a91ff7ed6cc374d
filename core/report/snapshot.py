"""A comparison of stored results as plain data: the rows, the baseline and the latency budget.

The studio's Compare page, a shared link and a downloaded report all render the same
`CompareSnapshot`, so what someone is sent is exactly what was on the screen, Pareto axes
included. Directions and units come from `optistudio.core.metrics.METRICS`, and for a variant's
task metrics (string_agreement, map_iou, ...) from the evaluator that declares them
(`optistudio.core.report.metric_info`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.metrics import METRICS
from optistudio.core.numerics.accuracy import GENERIC_METRIC_NAMES, GENERIC_METRICS
from optistudio.core.report.labels import result_label
from optistudio.core.report.metric_info import (
    LATENCY_AXES,
    TABLE_ACCURACY,
    higher_is_better,
    is_better,
    is_quality_metric,
    label_of,
)
from optistudio.core.report.pareto import pareto_front, sweet_spot
from optistudio.core.report.ties import tie, worst_noise

TABLE_METRICS = (
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "throughput",
    "peak_rss_mb",
    "cosine_error",
    "max_abs_error",
    "top1_agreement",
)
"""The columns of the comparison table, in order; each has a direction in the metric table."""
VIDEO_METRICS = (
    "streams",
    "stream_fps",
    "stream_fps_min",
    "dropped",
    "realtime_streams",
    "speedup_vs_per_frame",
    "decode_cpu_share",
)
"""A video run's own columns (`VideoReport.metric_values`), shown when a row has them; its total
fps and frame latency fill the throughput and latency columns beside benchmark results."""
DECODER_METRICS = (
    "tokens_per_s",
    "ttft_ms",
    "ms_per_token_p50",
    "ms_per_token_p99",
    "perplexity",
    "perplexity_increase",
    "size_mb",
    "size_vs_fp32",
)
"""A decoder's own columns (tokens/s, TTFT, time per token, perplexity, size), shown first when
a row has them: a decoder is read by its decoding, not by one forward pass."""
GENERIC_ORDER = tuple(m.name for m in GENERIC_METRICS if m.name not in METRICS)
"""Accuracy figures every judged run has that the metric table lacks (min_cosine, ...)."""
DEFAULT_LATENCY, DEFAULT_QUALITY = "p50_ms", "cosine_error"
"""The Pareto axes unless someone picks others: p50 latency against error vs the original."""


def shown_precision(model: str | None, run: str | None) -> str:
    """The precision a result ran at, as its label names it: the model file's ('int8' for a
    quantized variant) and the run's compute precision ('bf16' on OpenVINO), joined where both
    say something ('int8+bf16': INT8 weights, the rest computed in BF16)."""
    model, run = model or "fp32", run or "fp32"
    if run in ("fp32", model):
        return model
    return run if model == "fp32" else f"{model}+{run}"


class ResultRow(BaseModel):
    """One stored result: a benchmark job's figures for one backend, batch size and threads."""

    model_config = ConfigDict(extra="forbid")

    key: str = Field(description="job.backend.batch.threads, as it appears in the URL.")
    job_id: int
    model_id: int | None
    model: str
    parent_id: int | None = Field(description="The original this variant was made from.")
    recipe: str = Field(
        default="",
        description="The recipe that made it ('original' for the file as it came); '' in a "
        "snapshot shared before recipes were named.",
    )
    precision: str = Field(
        default="", description="What it ran at (`shown_precision`); '' reads as fp32."
    )
    backend: str
    batch_size: int
    threads: int
    environment_id: int | None
    metrics: dict[str, float | None]
    accuracy_note: str = Field(default="", description="Where the accuracy figures come from.")
    task: str | None = Field(default=None, description="The task the variant was judged in.")
    disagreements: list[dict[str, Any]] = Field(
        default_factory=list,
        description="The samples where the variant and its original disagree most: sample, "
        "reference, candidate, label, severity (the optimize job's drill-down).",
    )
    noise: float | None = Field(
        default=None,
        description="Relative noise of its latency: an optimize run's speedup interval "
        "(half its width over the speedup); None reads a benchmark's window spread.",
    )
    source: str = Field(
        default="benchmark",
        description="What measured it: 'benchmark' (percentiles, throughput) or 'optimize "
        "run' (p50 and speedup only, timed interleaved with its original).",
    )

    @property
    def latency_noise(self) -> float | None:
        """Relative noise of the row's latency figures (`optistudio.core.report.ties`): its own,
        else the spread of its benchmark's window medians; None when unknown."""
        if self.noise is not None:
            return self.noise
        return self.metrics.get("window_spread")

    @property
    def flags(self) -> list[str]:
        """'contended' (another process took CPU while it ran) and 'unstable' (its latency
        never settled), as the benchmark stored them: figures to read with care."""
        stable, contended = self.metrics.get("stable"), self.metrics.get("contended")
        return [
            word
            for word, on in (
                ("contended", contended is not None and contended >= 0.5),
                ("unstable", stable is not None and stable < 0.5),
            )
            if on
        ]

    @property
    def label(self) -> str:
        """Model, recipe, precision, backend, batch and threads (`labels.result_label`)."""
        return result_label(self)


class CompareSnapshot(BaseModel):
    """Everything a comparison view shows, frozen: rows, baseline, budget and environments."""

    model_config = ConfigDict(extra="forbid")

    title: str = "Comparison"
    created_at: str = ""
    rows: list[ResultRow]
    baseline: str | None = Field(default=None, description="Key of the row deltas refer to.")
    budget_ms: float | None = Field(default=None, description="Latency budget for the sweet spot.")
    latency_metric: str = Field(
        default=DEFAULT_LATENCY, description="The Pareto view's x axis; the budget is on it."
    )
    quality_metric: str = Field(
        default=DEFAULT_QUALITY, description="The Pareto view's y axis: any accuracy metric."
    )
    environments: dict[str, dict[str, Any]] = Field(default_factory=dict)

    def value(self, row: ResultRow, metric: str) -> float | None:
        v = row.metrics.get(metric)
        return None if v is None or math.isnan(v) else float(v)

    def points(self) -> list[dict[str, float | None]]:
        return [row.metrics for row in self.rows]

    def baseline_row(self) -> ResultRow | None:
        return next((r for r in self.rows if r.key == self.baseline), None)

    def axes_problem(self) -> str | None:
        """Why the stored axes cannot rank here, or None: a shared view may name a task metric
        whose evaluator this installation lacks, and then marks no frontier rather than fail."""
        for name in (self.latency_metric, self.quality_metric):
            if higher_is_better(name) is None:
                return (
                    f"The metric {name!r} has no known better direction here (install the "
                    "evaluator that measured it), so no Pareto frontier or sweet spot is marked."
                )
        return None

    def noises(self) -> list[float | None]:
        return [row.latency_noise for row in self.rows]

    def frontier(self) -> list[int]:
        """Rows on the latency / quality Pareto frontier (none when the axes cannot rank);
        differences within a tie (`optistudio.core.report.ties`) dominate nothing."""
        if self.axes_problem():
            return []
        metrics = [self.latency_metric, self.quality_metric]
        return pareto_front(self.points(), metrics, self.noises())

    def contended_baseline(self) -> str | None:
        """The sentence that flags every delta when the baseline ran CONTENDED or UNSTABLE
        (its figures are disturbed, so are the changes against them); None otherwise."""
        base = self.baseline_row()
        if base is None or not base.flags:
            return None
        how = " and ".join(flag.upper() for flag in base.flags)
        return (
            f"The baseline {base.label} ran {how}: every Δ compares against figures another "
            "process disturbed, so a large change may be the machine, not the model. Measure "
            "the baseline again on a quiet machine before reading the deltas."
        )

    def sweet_spot(self) -> int | None:
        if self.budget_ms is None or self.axes_problem():
            return None
        return sweet_spot(
            self.points(),
            latency=self.latency_metric,
            budget=self.budget_ms,
            quality=self.quality_metric,
        )


def best_rows(snapshot: CompareSnapshot, metric: str) -> list[int]:
    """Indices of the rows holding the best value of `metric`, with every row that ties with
    it (`optistudio.core.report.ties`: within the accuracy's resolution or the measurement's
    noise); none when every row ties, since then nothing is best."""
    values = [(i, snapshot.value(r, metric)) for i, r in enumerate(snapshot.rows)]
    known = [(i, v) for i, v in values if v is not None]
    if not known or higher_is_better(metric) is None:
        return []  # nothing to compare, or nothing says which way is better
    top, best = known[0]
    for i, v in known[1:]:
        if is_better(metric, v, best):
            top, best = i, v
    noises = snapshot.noises()
    tied = [i for i, v in known if tie(metric, v, best, worst_noise(noises[i], noises[top]))]
    return [] if len(known) > 1 and len(tied) == len(known) else tied


def delta(snapshot: CompareSnapshot, row: ResultRow, metric: str) -> float | None:
    """Relative change of `metric` against the baseline row (0.1 = 10 % more), or None."""
    base = snapshot.baseline_row()
    if base is None:
        return None
    value, reference = snapshot.value(row, metric), snapshot.value(base, metric)
    if value is None or reference is None or reference == 0:
        return None
    return (value - reference) / abs(reference)


def table_metrics(snapshot: CompareSnapshot) -> list[str]:
    """The table's columns: a decoder's own first when a row has them (`DECODER_METRICS`),
    `TABLE_METRICS` (with a video run's columns after throughput when a row has them), then the plotted axes and every task metric some row has
    (string_agreement, map_iou, ...), each once."""
    held = {name for row in snapshot.rows for name in row.metrics}
    after = TABLE_METRICS.index("throughput") + 1  # a video run's columns beside its throughput
    video = [name for name in VIDEO_METRICS if name in held]
    decoder = [name for name in DECODER_METRICS if name in held]
    columns = [*decoder, *TABLE_METRICS[:after], *video, *TABLE_METRICS[after:]]
    extra = [snapshot.latency_metric, snapshot.quality_metric]
    extra += sorted(
        {name for row in snapshot.rows for name in row.metrics if _is_task_metric(name)}
    )
    return list(dict.fromkeys([*columns, *extra]))


def video_note(snapshot: CompareSnapshot) -> str | None:
    """What a video run's figures mean beside benchmark results; None without video rows."""
    if not any("streams" in row.metrics for row in snapshot.rows):
        return None
    return (
        "Video runs (video ×N): throughput is frames per second over all N streams, and p50 / "
        "p99 are frame latency from the moment a frame is due to its result (decode, resize, "
        "batching across streams and inference included), not one inference's; the fps per "
        "stream, frames dropped, real-time streams held and the speedup over per-frame "
        "inference are the run's own columns."
    )


def decoder_note(snapshot: CompareSnapshot) -> str | None:
    """What a decoder's figures mean beside other results; None without decoder rows."""
    if not any("tokens_per_s" in row.metrics for row in snapshot.rows):
        return None
    return (
        "Decoders are read by their decoding: tokens/s is greedy decoding's speed at the row's "
        "batch, time per token p50 / p99 is one decoding step's (its p50 also fills p50 "
        "latency), TTFT is the prefill of the prompt at batch 1, and perplexity (with its "
        "increase over the FP32 original) is on the optimize job's text. An optimize run's rows "
        "were timed at batch 1, interleaved with their original; a benchmark's, one row per "
        "batch size it timed."
    )


def _is_task_metric(name: str) -> bool:
    """A task's own figure with a direction; the generic ones outside the metric table
    (min_cosine, mean_abs_error) may be plotted but get no column each."""
    return name not in METRICS and name not in GENERIC_METRIC_NAMES and is_quality_metric(name)


NOT_MEASURED = "not measured (optimize keeps p50 only)"
"""Why an optimize run's row has no percentile, throughput or memory: the run timed p50 alone."""
PERCENTILE_LIKE = frozenset(
    {"p10_ms", "p90_ms", "p95_ms", "p99_ms", "mean_ms", "min_ms", "max_ms", "throughput"}
    | {"peak_rss_mb", "model_rss_mb", "std_ms", "cv"}
)


def missing_reason(row: ResultRow, metric: str) -> str:
    """Why `row` has no value of `metric`, in a few words, for the dash in its cell."""
    if row.source == "optimize run" and metric in PERCENTILE_LIKE:
        return NOT_MEASURED
    if metric == "throughput" or (metric in METRICS and METRICS[metric].unit == "ms"):
        return "not measured by this run"
    if row.parent_id is None and is_quality_metric(metric):
        return "no figure: the original is the reference, or the metric needs labels"
    if is_quality_metric(metric):
        return "not measured: its accuracy report has no such figure"
    return "not measured by this run"


def missing_notes(snapshot: CompareSnapshot) -> list[str]:
    """One sentence per reason the table shows a dash, naming the columns it applies to:
    'p90 latency, p99 latency: not measured (optimize keeps p50 only)'."""
    columns: dict[str, list[str]] = defaultdict(list)
    for metric in table_metrics(snapshot):
        if all(snapshot.value(row, metric) is None for row in snapshot.rows):
            continue  # the column is not shown
        for row in snapshot.rows:
            if snapshot.value(row, metric) is None:
                reason = missing_reason(row, metric)
                if label_of(metric) not in columns[reason]:
                    columns[reason].append(label_of(metric))
    return [f"— in {', '.join(names)}: {reason}" for reason, names in columns.items()]


def table_records(snapshot: CompareSnapshot) -> list[dict[str, Any]]:
    """Flat records (one per row) with every table metric, its delta and whether it is best."""
    columns = table_metrics(snapshot)
    best = {metric: set(best_rows(snapshot, metric)) for metric in columns}
    frontier, sweet = set(snapshot.frontier()), snapshot.sweet_spot()
    records = []
    for i, row in enumerate(snapshot.rows):
        record: dict[str, Any] = {
            "key": row.key,
            "result": row.label,
            "baseline": row.key == snapshot.baseline,
            "pareto": i in frontier,
            "sweet spot": i == sweet,
            "baseline contended": snapshot.contended_baseline() is not None,
        }
        for metric in columns:
            record[metric] = snapshot.value(row, metric)
            record[f"{metric} delta"] = delta(snapshot, row, metric)
            record[f"{metric} best"] = i in best[metric]
            record[f"{metric} missing"] = (
                missing_reason(row, metric) if record[metric] is None else ""
            )
        records.append(record)
    return records


def axis_choices(snapshot: CompareSnapshot) -> tuple[list[str], list[str]]:
    """The metrics a Pareto axis may show: latencies, and accuracy metrics with a direction,
    each held by at least one row; the defaults first (a view without accuracy figures still
    says what it would plot), then the table's and the generic ones, then task metrics by name."""
    held = {name for row in snapshot.rows for name, v in row.metrics.items() if v is not None}
    latency = [DEFAULT_LATENCY, *(m for m in LATENCY_AXES if m in held)]
    quality = [DEFAULT_QUALITY, *(m for m in (*TABLE_ACCURACY, *GENERIC_ORDER) if m in held)]
    quality += sorted(m for m in held if _is_task_metric(m))
    return list(dict.fromkeys(latency)), list(dict.fromkeys(quality))


def pareto_title(snapshot: CompareSnapshot) -> str:
    """'Error vs p50 latency', 'String agreement vs p90 latency': the Pareto view's heading."""
    y = snapshot.quality_metric
    quality = "Error" if y == DEFAULT_QUALITY else label_of(y)
    return f"{quality[0].upper()}{quality[1:]} vs {label_of(snapshot.latency_metric)}"


ENVIRONMENT_FIELDS = {
    "cpu_model": "CPU",
    "logical_cores": "logical cores",
    "isa_flags": "ISA flags",
    "os": "OS",
    "machine": "architecture",
}


def environment_differences(snapshot: CompareSnapshot) -> list[str]:
    """Sentences naming what differs between the rows' environments (empty when alike)."""
    seen: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    unknown = 0
    for row in snapshot.rows:
        seen["threads"][str(row.threads or "default")].append(row.job_id)
        env = snapshot.environments.get(str(row.environment_id))
        if env is None:
            unknown += 1
            continue
        for field, title in ENVIRONMENT_FIELDS.items():
            seen[title][_text(env.get(field))].append(row.job_id)
        for library, version in (env.get("libraries") or {}).items():
            seen[f"{library} version"][str(version)].append(row.job_id)
    sentences = [
        f"Different {title}: " + "; ".join(f"{v} (job {_jobs(ids)})" for v, ids in values.items())
        for title, values in seen.items()
        if len(values) > 1
    ]
    if unknown:
        sentences.append(f"{unknown} result(s) have no recorded environment.")
    return sentences


def shared_environment(snapshot: CompareSnapshot) -> str:
    """The one environment every row was measured in, named: 'AMD EPYC 9B14, 2 logical cores,
    Linux x86_64; ISA avx2 avx512f ...'; '' when the rows have none recorded."""
    env = next(
        (
            snapshot.environments[str(r.environment_id)]
            for r in snapshot.rows
            if str(r.environment_id) in snapshot.environments
        ),
        None,
    )
    if env is None:
        return ""
    cores = f"{env['logical_cores']} logical cores" if env.get("logical_cores") else ""
    parts = [str(env[f]) for f in ("cpu_model",) if env.get(f)] + ([cores] if cores else [])
    parts += [" ".join(str(env[f]) for f in ("os", "machine") if env.get(f))]
    text = ", ".join(p for p in parts if p)
    isa = env.get("isa_flags")
    return f"{text}; ISA {_text(isa)}" if isa else text


def _text(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(str(v) for v in value) or "none"
    return str(value)


def _jobs(ids: list[int]) -> str:
    unique = sorted(set(ids))
    shown = ", ".join(f"#{i}" for i in unique[:5])
    return shown + (f" and {len(unique) - 5} more" if len(unique) > 5 else "")
