"""A .tflite's own inputs and outputs, for pipeline.json's LiteRT entries.

onnx2tf renames and transposes: outputs become `Identity`, `Identity_1`, ... and a 4-D image
tensor goes channels last (NCHW [1, 3, 224, 224] -> NHWC [1, 224, 224, 3]). A serving engine
that loads the .tflite sees those, so pipeline.json lists them as the interpreter reports them
(`get_input_details` / `get_output_details`; a dim the file leaves open, -1 in its shape
signature, as null), each beside the ONNX tensor it stands for (the same position: onnx2tf keeps
the ONNX order) and its layout against it: 'channels_last' when its dims are the ONNX dims with
dim 1 moved last, 'as_onnx' when they are equal, null otherwise.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from optistudio.core.batching.pipeline_file import LiteRtTensors, PipelineTensor
from optistudio.core.model.info import ModelInfo, TensorSpec

log = logging.getLogger(__name__)


def tflite_tensors(files: dict[str, Path], info: ModelInfo) -> dict[str, LiteRtTensors]:
    """Precision -> the file's tensors; empty when no LiteRT interpreter is installed here."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        return {}
    found = {}
    for precision, path in files.items():
        interpreter = Interpreter(model_path=str(path))
        found[precision] = LiteRtTensors(
            inputs=_listed(interpreter.get_input_details(), info.inputs),
            outputs=_listed(interpreter.get_output_details(), info.outputs),
        )
    return found


def _listed(details: list[dict[str, Any]], onnx: list[TensorSpec]) -> list[PipelineTensor]:
    return [
        tensor_entry(detail, onnx[i] if i < len(onnx) else None) for i, detail in enumerate(details)
    ]


def tensor_entry(detail: dict[str, Any], onnx: TensorSpec | None) -> PipelineTensor:
    """One interpreter tensor detail as pipeline.json lists it."""
    signature = detail.get("shape_signature")
    dims = signature if signature is not None and len(signature) else detail["shape"]
    shape: list[int | str | None] = [None if int(d) < 0 else int(d) for d in dims]
    return PipelineTensor(
        name=str(detail["name"]),
        dtype=np.dtype(detail["dtype"]).name,
        shape=shape,
        onnx_name=onnx.name if onnx else None,
        layout=layout(shape, onnx.shape) if onnx else None,
    )


def layout(shape: list[int | str | None], onnx_shape: list[Any]) -> str | None:
    """'as_onnx', 'channels_last' (ONNX dim 1 moved last) or None, comparing fixed dims only
    (an open dim on either side matches anything)."""
    if len(shape) != len(onnx_shape):
        return None
    if _same(shape, onnx_shape):
        return "as_onnx"
    if len(shape) >= 3 and _same(shape, [onnx_shape[0], *onnx_shape[2:], onnx_shape[1]]):
        return "channels_last"
    return None


def _same(ours: list[Any], theirs: list[Any]) -> bool:
    fixed = [(a, b) for a, b in zip(ours, theirs, strict=True) if _fixed(a) and _fixed(b)]
    return all(a == b for a, b in fixed)


def _fixed(dim: Any) -> bool:
    return isinstance(dim, int) and dim > 0
