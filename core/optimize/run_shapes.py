"""The shapes a model's outputs really have: one run of the original on ONNX Runtime, on the
run's first batch of data or on one batch of the spec's inputs (one sample, or as many as
the file declares its batch fixed at).

Recognition reads the declared shapes; some exporters declare an output wrongly (ddddocr's
captcha recognizers declare [1, seqlen] and return [T, 1, 8210] per-step scores) or leave every
dim open (PP-OCRv6's text detector, whose map is [N, 1, H, W]). When the declared shapes speak
for no task, the optimize run reads the task again from these (`recognize.as_run`), so such a
model is judged in its task and not by cosine alone.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from optistudio.core.backends import SessionOptions, get_backend
from optistudio.core.data.model_inputs import ModelInputs
from optistudio.core.data.source import CalibrationSource
from optistudio.core.errors import OptistudioError
from optistudio.core.model.info import ModelInfo

log = logging.getLogger(__name__)


def output_shapes(
    model: Path, info: ModelInfo, inputs: ModelInputs, data: CalibrationSource | None
) -> dict[str, list[int]]:
    """Each input's and output's shape in one run (the data's first batch, else one sample of
    `inputs`), by name; {} when the model cannot be run so (the run itself then says why)."""
    try:
        feeds = _first_feeds(info, inputs, data)
        loaded = get_backend("onnxruntime").load(model, SessionOptions())
        try:
            arrays = loaded.run(feeds)
        finally:
            loaded.close()
    except OptistudioError as exc:
        log.info("no run to read the output shapes from: %s", exc)
        return {}
    names = [tensor.name for tensor in info.outputs]
    fed = {name: list(np.shape(array)) for name, array in feeds.items()}
    return fed | {name: list(np.shape(array)) for name, array in zip(names, arrays, strict=True)}


def _first_feeds(
    info: ModelInfo, inputs: ModelInputs, data: CalibrationSource | None
) -> dict[str, np.ndarray]:
    if data is not None:
        return next(iter(data.batches()), {})
    one_run = inputs.dataset(info.inputs, samples=1)  # at the batch the file declares fixed
    return next(iter(one_run.batches()), {})
