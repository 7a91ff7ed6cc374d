"""ONNX -> LiteRT (.tflite) passes: FP32, FP16 weights, dynamic-range INT8, full-integer INT8.

Each pass converts the ONNX file it is given into a .tflite file (its output is `out` with the
suffix .tflite), through onnx2tf and TensorFlow's TFLite converter in a child process
(`optistudio.core.backends.litert_convert`); a variant made by one of these recipes is timed and
checked on the `litert` backend. Full-integer INT8 calibrates its activation ranges on the
run's calibration data (the same batches the ONNX INT8 passes read), at most 128 samples.

Dims the ONNX file leaves open past the batch axis (a text line's width, an image's size) are
fixed for the converter from the calibration data's first batch: onnx2tf needs them concrete.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.backends.litert_convert import (
    LiteRtPrecision,
    convert,
    write_calibration,
)
from optistudio.core.data.source import CalibrationSource
from optistudio.core.passes.base import PassContext, PassInfo, PassReport


class LiteRtConfig(BaseModel):
    """Options of the LiteRT conversions."""

    model_config = ConfigDict(extra="forbid")

    shapes: dict[str, list[int]] = Field(
        default_factory=dict,
        description="Input shapes the converter fixes (name -> dims, batch first); empty = "
        "the calibration data's sample shapes for inputs with open dims past the batch.",
    )


def run_fp32(model: Path, out: Path, config: LiteRtConfig, context: PassContext) -> PassReport:
    return _converted(model, out, config, context, "fp32")


def run_fp16(model: Path, out: Path, config: LiteRtConfig, context: PassContext) -> PassReport:
    return _converted(model, out, config, context, "fp16")


def run_int8_dynamic(
    model: Path, out: Path, config: LiteRtConfig, context: PassContext
) -> PassReport:
    return _converted(model, out, config, context, "int8_dynamic")


def run_int8(model: Path, out: Path, config: LiteRtConfig, context: PassContext) -> PassReport:
    return _converted(model, out, config, context, "int8")


def _converted(
    model: Path,
    out: Path,
    config: LiteRtConfig,
    context: PassContext,
    precision: LiteRtPrecision,
) -> PassReport:
    target = out.with_suffix(".tflite")
    calibration = None
    if precision == "int8":
        source = context.require_calibration("Full-integer INT8 for LiteRT")
        context.progress(0.05, "writing the calibration samples")
        calibration = write_calibration(source.batches(), out.with_suffix(".calibration.npz"))
    shapes = config.shapes or open_dims_from(model, context.calibration)
    context.progress(0.1, f"converting to LiteRT ({precision}) with onnx2tf")
    recorded = convert(model, target, precision, calibration=calibration, shapes=shapes)
    context.progress(1.0, "converted")
    details: dict[str, Any] = {"format": "tflite", "precision": precision, **recorded}
    if shapes:
        details["fixed_shapes"] = shapes
    return PassReport(output=target, details=details)


def open_dims_from(model: Path, data: CalibrationSource | None) -> dict[str, list[int]]:
    """Batch-1 shapes from the data's first batch for inputs with an open dim past the batch."""
    if data is None:
        return {}
    graph = onnx.load(model, load_external_data=False).graph
    weights = {i.name for i in graph.initializer}
    open_inputs = [
        i.name
        for i in graph.input
        if i.name not in weights and any(d.dim_value <= 0 for d in i.type.tensor_type.shape.dim[1:])
    ]
    if not open_inputs:
        return {}
    first: dict[str, np.ndarray] = next(iter(data.batches()), {})
    return {name: [1, *first[name].shape[1:]] for name in open_inputs if name in first}


def _info(name: str, label: str, precision: str, description: str, **kw: Any) -> PassInfo:
    return PassInfo(
        name=name,
        label=label,
        description=description,
        config="optistudio.core.passes.litert:LiteRtConfig",
        implementation=f"optistudio.core.passes.litert:run_{name.removeprefix('litert_')}",
        produces_precision=precision,
        **kw,
    )


CONVERTER_NOTE = " Needs the `litert` extra (onnx2tf and TensorFlow); the result is a .tflite file."
LITERT_FP32 = _info(
    "litert_fp32",
    "LiteRT FP32 (.tflite)",
    "fp32",
    "Converts the ONNX model to a LiteRT (TensorFlow Lite) FP32 flatbuffer with onnx2tf, "
    "keeping the ONNX input layout." + CONVERTER_NOTE,
)
LITERT_FP16 = _info(
    "litert_fp16",
    "LiteRT FP16 weights (.tflite)",
    "fp16",
    "LiteRT file with its weights stored in FP16: half the size; the CPU computes in FP32 "
    "(mobile GPUs in FP16)." + CONVERTER_NOTE,
)
LITERT_INT8_DYNAMIC = _info(
    "litert_int8_dynamic",
    "LiteRT INT8 dynamic range (.tflite)",
    "int8",
    "LiteRT file with INT8 weights and activations quantized at run time; needs no data."
    + CONVERTER_NOTE,
)
LITERT_INT8 = _info(
    "litert_int8",
    "LiteRT full-integer INT8 (.tflite)",
    "int8",
    "LiteRT file with INT8 weights and activations, the activation ranges calibrated on your "
    "data (float inputs and outputs kept)." + CONVERTER_NOTE,
    needs_calibration=True,
)
