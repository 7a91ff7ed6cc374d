"""The Batching page's what-if: the sliders' ranges, the headline with its band, the instances.

Plain functions the page calls and tests call without Streamlit. Three rules:
  - the headline p50, p99 and throughput are the median of the same simulated Verify runs the
    band is the 5 %-95 % of (`Band.p99_ms`, ...), so a headline always lies inside its band;
  - the arrival-rate slider spans up to RATE_HEADROOM x the highest ceiling any instance count
    on the slider reaches (each at the latencies measured with that many busy), in a 1-2-5
    step of about 1/RATE_STEPS of that; its bounds come from the profile as measured, which a
    Verify's refit does not move, so a Verify never resets the rate;
  - the instances slider spans the counts the profile measured; a profile that measured one
    only offers EXTRA_INSTANCES more, predicted as independent copies and said so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pandas as pd

from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.results import Band, LoadResult
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.simulate import simulate

RATE_HEADROOM = 1.5
RATE_STEPS = 200
EXTRA_INSTANCES = 1
"""Instances past one offered for a profile that measured only one (unmeasured: said so)."""
TABLE_REQUESTS = 3000
"""Requests per instance count in the what-if's table of instance counts."""


def most_instances(profile: LatencyProfile) -> int:
    """The instances slider's top: the largest count measured (1 + EXTRA_INSTANCES for a
    profile that measured one only)."""
    counts = profile.instance_counts()
    return counts[-1] if len(counts) > 1 else 1 + EXTRA_INSTANCES


def nice_step(span: float) -> float:
    """A 1-2-5 step near span / RATE_STEPS (0.01 at least): 75 req/s -> 0.5, 1500 -> 5."""
    raw = max(span / RATE_STEPS, 0.01)
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw * 0.999)


def rate_bounds(profile: LatencyProfile, largest_batch: int) -> tuple[float, float, float]:
    """(lowest, highest, step) of the arrival-rate slider, from `profile` as measured: up to
    RATE_HEADROOM x the best served ceiling of any count the instances slider offers."""
    top = max(
        profile.ceiling(largest_batch, with_handoff=True, instances=n)[0]
        for n in range(1, most_instances(profile) + 1)
    )
    step = nice_step(top * RATE_HEADROOM)
    high = max(step * 2, math.ceil(top * RATE_HEADROOM / step) * step)
    return step, round(high, 6), step


def kept_rate(value: float | None, bounds: tuple[float, float, float], default: float) -> float:
    """The rate to show: the one kept (a Verify's run of the page keeps it), pulled into the
    slider's range and onto its step; `default` when none is kept."""
    low, high, step = bounds
    if value is None:
        value = default
    value = min(max(value, low), high)
    return round(round(value / step) * step, 6) if value > low else low


def headline(band: Band, point: LoadResult) -> dict[str, float]:
    """The what-if's figures: p50, p99 and throughput from the band's own draws (median), so
    they lie inside it; mean batch and queue wait from the one long run `point`. A band stored
    before it kept its median gives the point's figures."""
    return {
        "throughput": band.throughput if band.throughput is not None else point.throughput,
        "p50_ms": band.p50_ms if band.p50_ms is not None else point.p50_ms,
        "p99_ms": band.p99_ms if band.p99_ms is not None else point.p99_ms,
        "mean_batch_size": point.mean_batch_size,
        "mean_queue_ms": point.mean_queue_ms,
    }


def instances_caption(profile: LatencyProfile, instances: int) -> str:
    """How the chosen instance count is predicted: measured (threads each, slowdown), or the
    rule taken for an unmeasured count."""
    note = profile.instances_note(instances)
    if note or instances == 1:
        return note
    row = next(r for r in profile.instance_latency if r.instances == instances)
    slowdown = ", ".join(
        f"b{b} {f:.2f}x" for b, f in zip(profile.batch_sizes, row.slowdown, strict=True)
    )
    return (
        f"{instances} instances measured running at once, {row.threads} thread(s) each: a batch "
        f"on one of them takes {slowdown} one instance's time; predictions use that."
    )


def by_instances(profile: LatencyProfile, settings: BatchingSettings, rate: float) -> pd.DataFrame:
    """Per instance count on the slider, the settings' prediction at `rate`: throughput, p99,
    the served ceiling and whether the count was measured."""
    measured = set(profile.instance_counts())
    rows = []
    for count in range(1, most_instances(profile) + 1):
        setting = settings.model_copy(update={"instances": count})
        result = simulate(profile, setting, rate=rate, requests=TABLE_REQUESTS)
        rows.append(
            {
                "instances": count,
                "measured": count in measured,
                "throughput": result.throughput,
                "p99_ms": None if result.saturated else result.p99_ms,
                "ceiling": profile.ceiling(
                    settings.max_batch_size, with_handoff=True, instances=count
                )[0],
            }
        )
    return pd.DataFrame(rows)


def verified_settings(
    settings: BatchingSettings,
    verify_jobs: list[dict[str, Any]],
    spec_of: Callable[[int], dict[str, Any]],
) -> tuple[BatchingSettings, str]:
    """The settings to export and a line saying where they come from: those the newest
    succeeded Verify (`recent_jobs` rows, newest first) served, its instance count among them,
    else the sliders'. `spec_of` reads a job's stored spec."""
    for job in verify_jobs:
        if job["status"] == "succeeded" and job.get("result") is not None:
            served = BatchingSettings.model_validate(spec_of(job["job"])["settings"])
            measured = job["result"].measured
            return served, (
                f"Exported as Verify job #{job['job']} served and measured them: max batch "
                f"{served.max_batch_size}, timeout {served.timeout_ms:g} ms, "
                f"{served.instances} instance(s): {measured.throughput:.1f} req/s, p99 "
                f"{measured.p99_ms:.1f} ms."
            )
    return settings, (
        "Not verified yet: exported as the sliders set them. Verify them first to export "
        "settings measured on this machine."
    )
