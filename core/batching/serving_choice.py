"""Which batching setting an export serves: the newest verified, else a recommendation, else a
free batch's default, never the benchmark's batch.

In order:
1. the setting the model's newest successful Verify served and measured (its job id named);
2. the setting the newest `batching recommend` stored on a profile (searched for the p99 budget
   and rate it names);
3. from the newest profile alone: its ceiling's batch as the largest, the powers of two below
   it preferred, the default queue delay, one instance;
4. `DEFAULT_SERVING` (max batch 8, preferred 4 and 8, 2 ms queue delay, one instance), said as
   such ("default: no batching measurement yet").

The choice is a plain dict, `BatchingSettings` as JSON plus "source" (verified, recommended,
profiled, default), "job" (the job it came from, or None) and "note" (one sentence for the
manifest), so it travels into pipeline.json and the bundle's manifest as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from optistudio.core.batching.settings import BatchingSettings

DEFAULT_SERVING = BatchingSettings(max_batch_size=8, preferred_batch_sizes=[4, 8], timeout_ms=2.0)
DEFAULT_NOTE = (
    "default: no batching measurement yet (max batch 8, preferred 4 and 8, queue delay 2 ms, "
    "1 instance); run `optistudio batching latency-profile MODEL_ID` and `verify` for a setting "
    "measured on the serving machine"
)


@dataclass(frozen=True)
class StoredSetting:
    """A setting stored by a job: a Verify's served setting, or a recommendation."""

    job: int
    settings: BatchingSettings
    said: str = ""
    """What the job found, for the note ('312.0 req/s, p99 9.1 ms')."""


def choose_serving(
    verified: StoredSetting | None = None,
    recommended: StoredSetting | None = None,
    profiled: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """The setting to serve (see the module docstring); `profiled` is (profile job, the batch
    size that reached its ceiling)."""
    if verified is not None:
        note = f"verified: served and measured by Verify job #{verified.job}"
        return _entry(verified, "verified", note) | {"verify_job": verified.job}
    if recommended is not None:
        note = f"recommended by `batching recommend` on profile job #{recommended.job}"
        return _entry(recommended, "recommended", note)
    if profiled is not None:
        job, best = profiled
        settings = BatchingSettings(
            max_batch_size=best, preferred_batch_sizes=_powers_of_two(best), timeout_ms=2.0
        )
        note = (
            f"profiled: profile job #{job} reached its ceiling at batch {best}, not verified "
            "(run `optistudio batching verify` to measure it)"
        )
        return _entry(StoredSetting(job, settings), "profiled", note)
    return DEFAULT_SERVING.model_dump(mode="json") | {
        "source": "default",
        "job": None,
        "note": DEFAULT_NOTE,
    }


def _entry(stored: StoredSetting, source: str, note: str) -> dict[str, Any]:
    said = f" ({stored.said})" if stored.said else ""
    settings = stored.settings
    line = (
        f"{note}{said}: max batch {settings.max_batch_size}, preferred "
        f"{_sizes(settings)}, queue delay {settings.timeout_ms:g} ms, "
        f"{settings.instances} instance(s)"
    )
    return settings.model_dump(mode="json") | {"source": source, "job": stored.job, "note": line}


def _sizes(settings: BatchingSettings) -> str:
    sizes = settings.preferred_batch_sizes or [settings.max_batch_size]
    return " and ".join(str(size) for size in sizes)


def _powers_of_two(largest: int) -> list[int]:
    """2, 4, ... below `largest`, and `largest` itself ([1] for 1)."""
    sizes, size = [], 2
    while size < largest:
        sizes.append(size)
        size *= 2
    return [*sizes, largest]


def triton_batching(serving: dict[str, Any]) -> dict[str, Any]:
    """`triton_config`'s batching keywords from a chosen setting (`choose_serving`'s dict)."""
    largest = int(serving["max_batch_size"])
    preferred = [int(size) for size in serving.get("preferred_batch_sizes") or []]
    return {
        "max_batch_size": largest,
        "preferred_batch_sizes": preferred or [largest],
        "max_queue_delay_us": round(float(serving["timeout_ms"]) * 1000),
        "instances": int(serving.get("instances", 1)),
    }
