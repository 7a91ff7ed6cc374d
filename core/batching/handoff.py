"""The runtime's own cost per batch under load, measured when a model is profiled.

Between two batches of an instance that has requests waiting, the Pipeline hands the results
back (futures resolved, the callers' threads woken) and cuts the next batch; on busy cores that
takes 0.1-1 ms per batch, which a profile of bare runs does not see and which caps throughput
at b / (latency(b) + hand-back). `measure_handoff` runs a short closed loop through the real
Pipeline at the largest profiled batch size, with twice as many clients as rows per batch so a
full batch always waits, and returns the mean gap from the end of one run to the next cut
(`optistudio.core.batching.trace.handoff_gaps_ms`). The simulator adds it to every batch.

The mean, not the median: on busy cores the gaps have a long tail (MiniLM at batch 8, 2 shared
cores, 2-s loops: median 0.3 ms, mean 0.6-1.7 ms, the slowest tenth over 4 ms in two of three
loops), and throughput pays the mean. On digits-cnn a 4-s closed loop's measured throughput was
3 % off the one simulated with the mean, 11 % off the one with the median.
"""

from __future__ import annotations

import numpy as np

from optistudio.core.backends import LoadedModel
from optistudio.core.batching.applicability import StackAxes
from optistudio.core.batching.loadgen import run_load
from optistudio.core.batching.pipeline import Pipeline
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.trace import handoff_gaps_ms
from optistudio.core.model.info import TensorSpec

HANDOFF_BATCHES = 40
"""Batches the closed loop sends when they fit in HANDOFF_SECONDS."""
HANDOFF_SECONDS = 2.0
"""Longest the closed loop runs, unless MIN_HANDOFF_BATCHES take longer."""
MIN_HANDOFF_BATCHES = 6


def measure_handoff(
    model: LoadedModel,
    inputs: list[TensorSpec],
    requests: list[dict[str, np.ndarray]],
    *,
    max_batch_size: int,
    batch_ms: float,
    axes: StackAxes | None = None,
) -> float | None:
    """Mean hand-back time (ms) of `model` served at `max_batch_size` under a saturating
    closed loop of one-row `requests` (cycled); `batch_ms` is the profiled latency of a full
    batch, which stretches the run for slow models. None when no two batches ran back to back."""
    gaps = measure_handoff_gaps(
        model, inputs, requests, max_batch_size=max_batch_size, batch_ms=batch_ms, axes=axes
    )
    return float(np.mean(gaps)) if gaps else None


def measure_handoff_gaps(
    model: LoadedModel,
    inputs: list[TensorSpec],
    requests: list[dict[str, np.ndarray]],
    *,
    max_batch_size: int,
    batch_ms: float,
    axes: StackAxes | None = None,
) -> list[float]:
    """Every hand-back time (ms) of the closed loop `measure_handoff` averages, in order: their
    spread is what one batch's hand-back may take. Empty when no two batches ran back to back."""
    settings = BatchingSettings(max_batch_size=max_batch_size, timeout_ms=0)  # no timeout waits
    seconds = max(HANDOFF_SECONDS, MIN_HANDOFF_BATCHES * 1.5 * batch_ms / 1000)
    with Pipeline([model.run], inputs, settings, axes=axes) as pipeline:
        run = run_load(
            pipeline,
            requests,
            process="closed",
            clients=2 * max_batch_size,
            requests=HANDOFF_BATCHES * max_batch_size,
            seconds=seconds,
        )
    return handoff_gaps_ms(run.batches)
