"""A comparison of stored results as plain data: the rows, the baseline and the latency budget.

The studio's Compare page, a shared link and a downloaded report all render the same
`CompareSnapshot`, so what someone is sent is exactly what was on the screen. Directions and
units come from `optistudio.core.metrics.METRICS`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.metrics import METRICS, is_better
from optistudio.core.report.pareto import pareto_front, sweet_spot

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


class ResultRow(BaseModel):
    """One stored result: a benchmark job's figures for one backend, batch size and threads."""

    model_config = ConfigDict(extra="forbid")

    key: str = Field(description="job.backend.batch.threads, as it appears in the URL.")
    job_id: int
    model_id: int | None
    model: str
    parent_id: int | None = Field(description="The original this variant was made from.")
    precision: str = ""
    backend: str
    batch_size: int
    threads: int
    environment_id: int | None
    metrics: dict[str, float | None]
    accuracy_note: str = Field(default="", description="Where the accuracy figures come from.")

    @property
    def label(self) -> str:
        precision = f" [{self.precision}]" if self.precision not in ("", "fp32") else ""
        return (
            f"#{self.job_id} {self.model}{precision} · {self.backend} · b{self.batch_size} · "
            f"t{self.threads}"
        )


class CompareSnapshot(BaseModel):
    """Everything a comparison view shows, frozen: rows, baseline, budget and environments."""

    model_config = ConfigDict(extra="forbid")

    title: str = "Comparison"
    created_at: str = ""
    rows: list[ResultRow]
    baseline: str | None = Field(default=None, description="Key of the row deltas refer to.")
    budget_ms: float | None = Field(default=None, description="Latency budget for the sweet spot.")
    latency_metric: str = "p50_ms"
    quality_metric: str = "cosine_error"
    environments: dict[str, dict[str, Any]] = Field(default_factory=dict)

    def value(self, row: ResultRow, metric: str) -> float | None:
        v = row.metrics.get(metric)
        return None if v is None or math.isnan(v) else float(v)

    def points(self) -> list[dict[str, float | None]]:
        return [row.metrics for row in self.rows]

    def baseline_row(self) -> ResultRow | None:
        return next((r for r in self.rows if r.key == self.baseline), None)

    def frontier(self) -> list[int]:
        """Rows on the latency / quality Pareto frontier."""
        return pareto_front(self.points(), [self.latency_metric, self.quality_metric])

    def sweet_spot(self) -> int | None:
        if self.budget_ms is None:
            return None
        return sweet_spot(
            self.points(),
            latency=self.latency_metric,
            budget=self.budget_ms,
            quality=self.quality_metric,
        )


def best_rows(snapshot: CompareSnapshot, metric: str) -> list[int]:
    """Indices of the rows holding the best value of `metric` (all of them on a tie)."""
    values = [(i, snapshot.value(r, metric)) for i, r in enumerate(snapshot.rows)]
    known = [(i, v) for i, v in values if v is not None]
    if not known:
        return []
    best = known[0][1]
    for _, v in known[1:]:
        if is_better(metric, v, best):
            best = v
    return [i for i, v in known if v == best]


def delta(snapshot: CompareSnapshot, row: ResultRow, metric: str) -> float | None:
    """Relative change of `metric` against the baseline row (0.1 = 10 % more), or None."""
    base = snapshot.baseline_row()
    if base is None:
        return None
    value, reference = snapshot.value(row, metric), snapshot.value(base, metric)
    if value is None or reference is None or reference == 0:
        return None
    return (value - reference) / abs(reference)


def table_records(snapshot: CompareSnapshot) -> list[dict[str, Any]]:
    """Flat records (one per row) with every table metric, its delta and whether it is best."""
    best = {metric: set(best_rows(snapshot, metric)) for metric in TABLE_METRICS}
    frontier, sweet = set(snapshot.frontier()), snapshot.sweet_spot()
    records = []
    for i, row in enumerate(snapshot.rows):
        record: dict[str, Any] = {
            "key": row.key,
            "result": row.label,
            "baseline": row.key == snapshot.baseline,
            "pareto": i in frontier,
            "sweet spot": i == sweet,
        }
        for metric in TABLE_METRICS:
            record[metric] = snapshot.value(row, metric)
            record[f"{metric} delta"] = delta(snapshot, row, metric)
            record[f"{metric} best"] = i in best[metric]
        records.append(record)
    return records


def column_title(metric: str) -> str:
    """'p50 latency (ms) ↓': label, unit and the direction arrow from the metric table."""
    spec = METRICS[metric]
    arrow = {True: " ↑", False: " ↓", None: ""}[spec.higher_is_better]
    unit = f" ({spec.unit})" if spec.unit else ""
    return f"{spec.label}{unit}{arrow}"


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


def _text(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(str(v) for v in value) or "none"
    return str(value)


def _jobs(ids: list[int]) -> str:
    unique = sorted(set(ids))
    shown = ", ".join(f"#{i}" for i in unique[:5])
    return shown + (f" and {len(unique) - 5} more" if len(unique) > 5 else "")
