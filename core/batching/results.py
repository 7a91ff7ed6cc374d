"""What a load run gave, predicted by the simulator or measured by the load generator.

Both are summarised by one function, so prediction and measurement are computed alike:
latency = finish - send, queue wait = batch start - send, throughput = completed requests in the
window / (last finish - first send in the window), where the window skips the first
`warmup_share` of requests. The realised arrival rate is (sent - 1) / (last send - first send)
over every request sent (refused ones too): what the arrivals really were, beside the rate asked
for (a Poisson schedule of n requests strays from it by about 1 / sqrt(n); a load generator
that falls behind its schedule sends fewer). An open-loop run is saturated when requests were refused or the last
answer trails the last send by more than 3 % of the sending span (the queue kept growing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.errors import InvalidSpec


@dataclass(frozen=True)
class BatchRecord:
    """One batch an instance ran, in seconds (the runtime's clock, a load run's, or simulated):
    the arrival of its oldest request, when it was cut from the queue, and when the runner call
    began (after concatenation) and ended. Results are handed back after run_end."""

    instance: int
    rows: int
    requests: int
    oldest: float
    cut: float
    run_start: float
    run_end: float


class LoadResult(BaseModel):
    """What a load run gave, predicted (simulation) or measured (load generator)."""

    model_config = ConfigDict(extra="forbid")

    throughput: float = Field(description="Completed requests per second.")
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    mean_queue_ms: float = Field(description="Mean wait before the request's batch started.")
    mean_compute_ms: float = Field(description="Mean run time of the request's batch.")
    mean_batch_size: float
    completed: int
    rejected: int = Field(default=0, description="Refused because the queue was full.")
    failed: int = 0
    offered_rate: float | None = Field(default=None, description="Arrival rate asked for.")
    realised_rate: float | None = Field(
        default=None,
        description="Requests actually sent per second over the run (None: fewer than two, or "
        "a result stored before it was kept).",
    )
    saturated: bool = Field(
        default=False, description="Arrivals outpaced service: the queue kept growing."
    )
    batch_histogram: dict[int, int] = Field(default_factory=dict)


def summarize(
    sent: Sequence[float],
    started: Sequence[float],
    finished: Sequence[float],
    batch_sizes: Sequence[int],
    *,
    rejected: int = 0,
    failed: int = 0,
    rate: float | None = None,
    warmup_share: float = 0.1,
) -> LoadResult:
    """Summary of per-request times in seconds (NaN finish = not served)."""
    send, start, finish = (np.asarray(x, dtype=np.float64) for x in (sent, started, finished))
    batch = np.asarray(batch_sizes)
    served = ~np.isnan(finish)
    window = served.copy()
    window[: int(len(send) * warmup_share)] = False
    if not window.any():
        raise InvalidSpec("No request was served; lower the rate or raise max_queue.")
    latency = (finish[window] - send[window]) * 1000
    span = finish[window].max() - send[window].min()
    throughput = float(window.sum() / span) if span > 0 else 0.0
    return LoadResult(
        throughput=throughput,
        p50_ms=float(np.percentile(latency, 50)),
        p90_ms=float(np.percentile(latency, 90)),
        p99_ms=float(np.percentile(latency, 99)),
        mean_ms=float(latency.mean()),
        mean_queue_ms=float((start[window] - send[window]).mean() * 1000),
        mean_compute_ms=float((finish[window] - start[window]).mean() * 1000),
        mean_batch_size=float(batch[window].mean()),
        completed=int(served.sum()),
        rejected=rejected,
        failed=failed,
        offered_rate=rate,
        realised_rate=realised_rate(send),
        saturated=bool(
            rate is not None and (_backlog_share(send[window], finish[window]) > 0.03 or rejected)
        ),
        batch_histogram=_batch_histogram(batch[served]),
    )


def realised_rate(sent: Sequence[float] | np.ndarray) -> float | None:
    """Requests sent per second between the first and the last send (seconds); None for fewer
    than two sends or no time between them."""
    times = np.asarray(sent, dtype=np.float64)
    span = float(times.max() - times.min()) if len(times) > 1 else 0.0
    return (len(times) - 1) / span if span > 0 else None


class Band(BaseModel):
    """The range a prediction's figures take over resampled draws (see
    optistudio.core.batching.simulate.simulate_band): the `level` central share of the p50, p99
    and throughput of `draws` simulated runs of `requests` requests each."""

    model_config = ConfigDict(extra="forbid")

    p50_low_ms: float
    p50_high_ms: float
    p99_low_ms: float
    p99_high_ms: float
    throughput_low: float
    throughput_high: float
    level: float = Field(description="Central share of the draws the band spans, e.g. 0.9.")
    draws: int = Field(description="Simulated runs the band rests on.")
    requests: int = Field(description="Requests per simulated run.")
    seconds: float | None = Field(
        default=None, description="The run length (s) the draws stand for (open loop)."
    )
    p50_ms: float | None = Field(
        default=None, description="The draws' median p50: a headline inside its band."
    )
    p99_ms: float | None = Field(
        default=None, description="The draws' median p99 (None in bands stored before)."
    )
    throughput: float | None = Field(default=None, description="The draws' median throughput.")
    served_error: float | None = Field(
        default=None,
        description="The median of the simulator's errors on the profile's own served probes "
        "(measured over simulated p99) the p99 band was stretched to hold (optistudio.core."
        "batching.served_checks); None when it was not.",
    )
    served_error_range: list[float] | None = Field(
        default=None,
        description="The lowest and highest of those errors, one per served probe of the "
        "setting's kind: the p99 band's bottom was stretched by the lowest where below 1, its "
        "top by the highest where above 1; None when it was not (or stored before).",
    )
    paces: list[float] | None = Field(
        default=None,
        description="The slowest and fastest pace (model time over the profile's) the draws ran "
        "the model at, from the machine's speed beside the profile's serving probes "
        "(`LatencyProfile.paces`); None when the profile kept none.",
    )
    saturated_share: float | None = Field(
        default=None,
        description="The share of the draws whose queue kept growing through the run (arrivals "
        "past what that draw served): the setting lies past its ceiling at those draws' paces, "
        "and the band's top is a growing queue's wait; None in bands stored before.",
    )

    def holds_p99(self, p99_ms: float) -> bool:
        """Whether a measured p99 falls inside the band."""
        return self.p99_low_ms <= p99_ms <= self.p99_high_ms

    def p99_width(self, p99_ms: float) -> float:
        """Half the band's width as a share of a p99 (the predicted one): 0.2 is +-20 %."""
        return (self.p99_high_ms - self.p99_low_ms) / 2 / p99_ms if p99_ms > 0 else float("inf")


def p99_halves(
    latency_ms: Sequence[float], *, warmup_share: float = 0.1, minimum: int = 100
) -> tuple[float, float] | None:
    """p99 (ms) of the first and of the second half of a run's requests, in sending order,
    after the first `warmup_share` (as `summarize` skips): how far a measured tail moves
    within one run. Under queueing a p99 is set by a few bursts, so a short run's p99 is
    itself uncertain; halves far apart say the run was too short to pin it down. None with
    fewer than `minimum` requests per half (a p99 of fewer is little more than the maximum)."""
    window = np.asarray(latency_ms, dtype=np.float64)[int(len(latency_ms) * warmup_share) :]
    window = window[~np.isnan(window)]
    half = len(window) // 2
    if half < minimum:
        return None
    return float(np.percentile(window[:half], 99)), float(np.percentile(window[half:], 99))


def _backlog_share(sent: np.ndarray, finished: np.ndarray) -> float:
    """How far the last answer trails the last send, as a share of the sending span: a queue
    that keeps up ends within a few service times; one that grows ends far behind."""
    span = sent.max() - sent.min()
    return float((finished.max() - sent.max()) / span) if span > 0 else 0.0


def _batch_histogram(batch_sizes: np.ndarray) -> dict[int, int]:
    """Number of batches of each size (each batch of b rows counted once, not b times)."""
    sizes, counts = np.unique(batch_sizes, return_counts=True)
    return {int(size): int(count // size) for size, count in zip(sizes, counts, strict=True)}
