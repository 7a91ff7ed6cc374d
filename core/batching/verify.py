"""Measure a batching setting for real: load the Pipeline, drive it with the load generator.

Requests carry one row of inputs (`optistudio.core.data.inputs.requests_batch`: the user's
request shapes, dims, values and arrays, the rest synthetic), a few distinct ones cycled so no
cache flatters the run. The pipeline is
warmed up with one full batch per instance before the clock starts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from optistudio.core.backends.target import RunTarget
from optistudio.core.batching.fixed_batch import Batchable, BatchRefused, batchable
from optistudio.core.batching.loadgen import LoadRun, run_load
from optistudio.core.batching.pipeline import Pipeline
from optistudio.core.batching.settings import BatchingSettings, serving_target
from optistudio.core.batching.simulate import Process
from optistudio.core.data.model_inputs import ModelInputs
from optistudio.core.model.intake import inspect_model

DISTINCT_REQUESTS = 8


def request_feeds(
    model_path: Path, inputs: ModelInputs | None = None, count: int = DISTINCT_REQUESTS
) -> list[dict[str, np.ndarray]]:
    """`count` distinct one-row requests for the model (one row on each input's batch axis)."""
    inputs = inputs or ModelInputs()
    info = inspect_model(model_path)
    arrays = inputs.arrays(info.inputs)
    return [inputs.requests(info.inputs, 1, arrays=arrays, seed=seed) for seed in range(count)]


def measure_load(
    model_path: Path,
    settings: BatchingSettings,
    *,
    rate: float | None,
    process: Process = "poisson",
    clients: int = 0,
    seconds: float | None = 5.0,
    requests: int | None = None,
    target: RunTarget | None = None,
    inputs: ModelInputs | None = None,
    seed: int = 0,
) -> LoadRun:
    """Serve the model with `settings` (its `instances` sessions behind the balancer) under
    the given arrivals and measure what happens (a batch fixed at 1 through its checked
    rewrite: `LoadRun.note` says so; one whose rewrite is refused as it is, at max batch 1
    only, else BatchRefused)."""
    try:
        freed = batchable(model_path, inputs)
    except BatchRefused:
        if settings.max_batch_size > 1:
            raise
        freed = Batchable(model_path, "The model's batch is fixed at 1: served as it is.")
    model_path = freed.path
    inputs = inputs or ModelInputs()
    feeds = request_feeds(model_path, inputs)
    backend, options = serving_target(target)
    loaded = Pipeline.load(
        model_path, settings, backend=backend, options=options, batch_axes=inputs.batch_axes
    )
    with loaded as pipeline:
        _warm_up(pipeline, feeds)
        run = run_load(
            pipeline,
            feeds,
            process=process,
            rate=rate,
            clients=clients,
            requests=requests,
            seconds=seconds,
            seed=seed,
        )
    run.note = freed.note
    return run


def _warm_up(pipeline: Pipeline, feeds: list[dict[str, np.ndarray]]) -> None:
    settings = pipeline.settings
    rounds = min(settings.max_batch_size * settings.instances, settings.max_queue)
    futures = [pipeline.submit(feeds[i % len(feeds)]) for i in range(rounds)]
    for future in futures:
        future.result()
