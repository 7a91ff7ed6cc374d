"""Dynamic batching for library users: `optistudio.PipelineOptimizer`.

    with PipelineOptimizer(max_batch_size=32, timeout_ms=50, memory_pool_ratio=0.8) as server:
        server.load("model.onnx")                  # the first backend for the CPU: onnxruntime
        outputs = server.predict({"x": rows})      # blocks; one request, rows along dim 0
        outputs = server.predict(rows)             # the same, for a model with one input
        future = server.submit({"x": rows})        # at once; future.result() is a Response

    server = PipelineOptimizer.from_file("bundle.zip")   # or its pipeline.json: loaded and
                                                         # batched as the file's "serving" says

It wraps the batching runtime, `optistudio.core.batching.pipeline.Pipeline`, whose docstring
states the batch rule: requests from any number of threads queue up, leave as one batch of at
most max_batch_size rows when the batch is full or its oldest request has waited timeout_ms,
run once (concatenated along dim 0), and are split back, each request getting its own rows.
The model needs a dynamic batch dim. Other BatchingSettings (instances, preferred_batch_sizes,
eager_threshold, max_queue) are keyword arguments too, checked at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np

from optistudio.core.backends.base import DeviceType, named_feeds
from optistudio.core.backends.predictor import pick_backend, session_options_from
from optistudio.core.batching.fixed_batch import Batchable, BatchRefused, batchable
from optistudio.core.batching.pipeline import Pipeline, PipelineStats, Response
from optistudio.core.batching.pipeline_file import PipelineFile, opened_pipeline
from optistudio.core.batching.settings import BatchingSettings, serving_options, settings_from
from optistudio.core.errors import InvalidSpec


class PipelineOptimizer:
    """A model served behind dynamic batching; load it, then predict or submit requests.

    memory_pool_ratio (0 < ratio <= 1; None: each runtime's default) is the share of the
    device's memory each instance's session may pool:
    - ONNX Runtime on the CPU: the session gets a CPU arena of its own capped at ratio x the
      host's memory, grown by what is requested (kSameAsRequested); a batch that needs more
      fails, and only that batch's requests get the error.
    - ONNX Runtime on CUDA ('cuda:N'): the CUDA arena is capped, gpu_mem_limit = ratio x the
      GPU's total memory, grown by what is requested.
    - ONNX Runtime's TensorRT provider: trt_max_workspace_size = ratio x the GPU's memory.
    - The TensorRT backend: the builder's workspace memory pool limit = ratio x the device's
      memory.
    - OpenVINO: no effect (it has no such setting); the model's details say it was not applied.
    Every one of `instances` sessions gets that share, so keep instances x ratio <= 1 on a GPU.
    """

    def __init__(
        self,
        max_batch_size: int | None = None,
        timeout_ms: float | None = None,
        memory_pool_ratio: float | None = None,
        **settings: Any,
    ) -> None:
        given = {
            "max_batch_size": max_batch_size,
            "timeout_ms": timeout_ms,
            "memory_pool_ratio": memory_pool_ratio,
        }
        self.settings: BatchingSettings = settings_from(
            {**{key: value for key, value in given.items() if value is not None}, **settings}
        )
        self._pipeline: Pipeline | None = None
        self.note = ""
        """Set by `load` when the model's batch was fixed at 1 and its checked rewrite serves."""
        self.document: PipelineFile | None = None
        """The pipeline.json `from_file` read; None for a model loaded by path."""

    @classmethod
    def from_file(cls, path: str | Path, **options: Any) -> PipelineOptimizer:
        """Serve what a pipeline.json v1 names (`optistudio.core.batching.pipeline_file`): an
        export bundle (.zip or its folder) or the file itself, its model on the file's backend,
        device and threads, batched with its "serving" setting. `options` are SessionOptions
        fields that win over the file's. A model whose batch is fixed at 1 and cannot be
        freed is served as it is, one row a batch (Triton's max_batch_size 0). Raises
        InvalidSpec for a file that is not v1 or misses its model."""
        with opened_pipeline(path) as opened:
            document = opened.document
            settings = document.batching().model_dump()
            given = file_options(document) | options
            where = {"backend": document.backend, "device": document.device}
            try:
                optimizer = cls(**settings).load(opened.model_path, **where, **given)
            except BatchRefused:  # a batch fixed at 1 for good: one request a batch
                optimizer = cls(**(settings | UNBATCHED))
                optimizer.load(opened.model_path, **where, **given)
        optimizer.document = document
        return optimizer

    def load(
        self,
        model: str | Path,
        *,
        backend: str | None = None,
        device: DeviceType | str = "cpu",
        **options: Any,
    ) -> PipelineOptimizer:
        """Load `settings.instances` sessions of an ONNX model behind the pipeline.

        `backend` defaults to the first registered one that runs on `device`; `options` are
        SessionOptions fields (threads, precision, ...). The runtime's idle threads do not spin
        unless spin_wait=True is given. A model whose batch is fixed at 1 is served through its
        checked rewrite with a free batch (`optistudio.core.batching.fixed_batch`; `note` says
        so). Raises InvalidSpec when requests cannot stack or an option is bad, or when a model
        is loaded already. Returns this optimizer.
        """
        if self._pipeline is not None:
            raise InvalidSpec(
                "This PipelineOptimizer serves a model already.",
                hint="close() it first, or make another PipelineOptimizer.",
            )
        defaults = serving_options().model_dump(exclude_unset=True)
        session_options = session_options_from({**defaults, **options, "device": device})
        name = backend or pick_backend(session_options.device)
        try:
            freed = batchable(Path(model))
        except BatchRefused as exc:
            if self.settings.max_batch_size != 1:
                raise
            freed = Batchable(Path(model), f"{exc.message} Served as it is, one row a batch.")
        self._pipeline = Pipeline.load(
            freed.path, self.settings, backend=name, options=session_options
        )
        self.note = freed.note
        return self

    def submit(self, inputs: Mapping[str, Any] | np.ndarray) -> Future[Response]:
        """Queue one request (arrays by input name, or one array for a model with one input;
        rows along dim 0) and return its future; its Response holds the outputs and the size
        of the batch it ran in."""
        return self._serving().submit(self._feeds(inputs))

    def predict(
        self, inputs: Mapping[str, Any] | np.ndarray, *, timeout: float | None = None
    ) -> list[np.ndarray]:
        """Submit one request and wait for its outputs (in model order, its rows only)."""
        return self._serving().infer(self._feeds(inputs), timeout=timeout).outputs

    async def predict_async(self, inputs: Mapping[str, Any] | np.ndarray) -> list[np.ndarray]:
        """Submit one request and await its outputs without blocking the event loop."""
        response = await self._serving().infer_async(self._feeds(inputs))
        return response.outputs

    @property
    def stats(self) -> PipelineStats | None:
        """Batches run and their sizes since the model was loaded; None before."""
        return self._pipeline.stats if self._pipeline is not None else None

    def close(self, *, drain: bool = True) -> None:
        """Stop taking requests and release the sessions; queued requests run first (drain)
        or fail with Cancelled. A closed optimizer can load a model again."""
        if self._pipeline is not None:
            self._pipeline.close(drain=drain)
            self._pipeline = None

    def __enter__(self) -> PipelineOptimizer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _feeds(self, inputs: Mapping[str, Any] | np.ndarray) -> dict[str, np.ndarray]:
        return named_feeds(inputs, [spec.name for spec in self._serving().inputs])

    def _serving(self) -> Pipeline:
        if self._pipeline is None:
            raise InvalidSpec(
                "No model is loaded on this PipelineOptimizer.",
                hint="Call .load('model.onnx') first.",
            )
        return self._pipeline


def file_options(document: PipelineFile) -> dict[str, Any]:
    """SessionOptions a pipeline.json sets: its threads, and its precision where the backend
    takes one (ONNX Runtime runs a model in the precision it is stored in: none is asked)."""
    options: dict[str, Any] = {}
    if document.threads is not None:
        options["threads"] = document.threads
    if document.backend != "onnxruntime" and document.precision in PRECISIONS:
        options["precision"] = document.precision
    return options


UNBATCHED = {"max_batch_size": 1, "preferred_batch_sizes": [], "eager_threshold": None}
"""The settings of a model whose batch stays fixed at 1 (Triton's max_batch_size 0)."""
PRECISIONS = ("fp32", "fp16", "bf16", "int8")
"""The precisions SessionOptions can ask for (a file's other names are left to the backend)."""
