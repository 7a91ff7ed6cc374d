"""INT8 post-training quantization with NNCF on the OpenVINO model, written as an OpenVINO IR.

What a user of OpenVINO does by default: `nncf.quantize(ov.convert_model(path), dataset)`.
OpenVINO's ONNX frontend takes the model at any opset (NNCF's ONNX backend refuses opset < 10)
and NNCF places its FakeQuantize ops on OpenVINO's own graph, where the CPU plugin fuses them
(ranges measured on calibration data by min/max, weights per output channel, then fast bias
correction; the transformer flavour keeps attention's sensitive ops in float and applies smooth
quant). The result is an IR (.xml + .bin, weights kept in FP32 where float) that only OpenVINO
runs; its inputs and outputs keep the ONNX names, so it is fed as the original is. Which
precision the float rest runs in is the recipe's (OpenVINO's INFERENCE_PRECISION_HINT).

A model OpenVINO cannot convert at an opset older than 13 is converted to opset 13 with
onnx.version_converter and tried again; the step's warnings say so. Calibration samples are
int8_nncf's (optistudio.core.passes.nncf_quantize.CalibrationSamples): single rows when every
input's batch dim is dynamic, at most `subset_size` of them.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx
from onnx import version_converter
from pydantic import Field

from optistudio.core.backends.openvino_backend import runtime_message
from optistudio.core.errors import BackendUnavailable, PassFailed, first_line
from optistudio.core.passes.base import PassContext, PassInfo, PassReport
from optistudio.core.passes.nncf_quantize import (
    PER_CHANNEL_OPSET,
    CalibrationSamples,
    NncfConfig,
    default_opset,
    nncf_errors,
    quantize_options,
)

OPENVINO_TYPES = {
    "Conv": ("Convolution", "GroupConvolution"),
    "ConvTranspose": ("ConvolutionBackpropData", "GroupConvolutionBackpropData"),
    "Gemm": ("MatMul",),
    "Mul": ("Multiply",),
    "Sub": ("Subtract",),
    "Div": ("Divide",),
}
"""ONNX op types -> the OpenVINO op types they become, for ignored_types given in ONNX names."""


class NncfOpenVinoConfig(NncfConfig):
    """Options of int8_nncf_ov: int8_nncf's, op types as OpenVINO names them, and the front end."""

    ignored_types: list[str] = Field(
        default_factory=list,
        description="Op types kept in float, as OpenVINO names them (Convolution, MatMul, "
        "Add, ...); the ONNX names Conv, ConvTranspose, Gemm, Mul, Sub and Div are translated.",
    )
    float_front_end: bool = Field(
        False,
        description="Keep in float every op that feeds a Log: a spectrum computed in the graph "
        "(STFT convolutions, magnitudes, powers), whose values span decades that INT8's 256 "
        "steps cannot hold before the log compresses them. The layers after the log are "
        "quantized as usual.",
    )


def log_front_end(model: Any) -> list[str]:
    """The friendly names of the ops of an OpenVINO model that feed a Log, directly or through
    others (its inputs and constants included), in graph order; [] without a Log."""
    stack = [op for op in model.get_ops() if op.get_type_name() == "Log"]
    upstream: set[str] = set()
    while stack:
        for port in stack.pop().inputs():
            source = port.get_source_output().get_node()
            if source.get_friendly_name() not in upstream:
                upstream.add(source.get_friendly_name())
                stack.append(source)
    return [
        op.get_friendly_name()
        for op in model.get_ordered_ops()
        if op.get_friendly_name() in upstream
    ]


def front_end_scope(
    model: Any, config: NncfOpenVinoConfig, warnings: list[str]
) -> tuple[list[str], dict[str, Any]]:
    """The op names `config` keeps in float on the converted `model` (its log front end, where
    asked), and the step's details about it: how many ops feed a Log (so a run can tell a model
    with a front end) and how many were kept in float; a warning where one was asked and the
    model has none."""
    front = log_front_end(model)
    if config.float_front_end and not front:
        warnings.append(
            "float_front_end: the model has no Log op, so no front end was kept in float."
        )
    kept = front if config.float_front_end else []
    return kept, {"log_front_end_ops": len(front), "float_front_end": len(kept)}


def run_int8_nncf_ov(
    model: Path, out: Path, config: NncfOpenVinoConfig, context: PassContext
) -> PassReport:
    """Convert to OpenVINO, quantize with nncf.quantize on its graph, write `out` as .xml."""
    source = context.require_calibration("NNCF INT8 on the OpenVINO model")
    ov, nncf = openvino_and_nncf()
    proto = onnx.load(model, load_external_data=False)
    converted, opset, warnings = openvino_model(ov, model, proto)
    ignored = openvino_types(config.ignored_types)
    warnings += _absent_types(converted, ignored)
    front, front_details = front_end_scope(converted, config, warnings)
    samples = CalibrationSamples(source, proto, config.subset_size, context)
    options = quantize_options(config.model_copy(update={"ignored_types": ignored}), front)
    context.progress(0.0, "calibrating with NNCF on the OpenVINO model")
    with nncf_errors(), contextlib.redirect_stdout(sys.stderr):  # NNCF's progress bars
        quantized = quantized_reshaping(
            lambda model: nncf.quantize(model, nncf.Dataset(samples), **options),
            converted,
            samples,
            warnings,
        )
    context.progress(0.95, "saving the OpenVINO IR")
    target = out.with_suffix(".xml")
    target.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(quantized, str(target), compress_to_fp16=False)
    context.progress(1.0, "quantized")
    details = {
        "format": "OpenVINO IR (.xml + .bin)",
        **fake_quantize_details(quantized),
        "preset": config.preset,
        "fast_bias_correction": config.fast_bias_correction,
        "activation_ranges": config.activation_ranges,
        "model_type": config.model_type,
        **front_details,
        "opset": opset,
        "calibration": {
            "samples": samples.used,
            "split_batches": samples.split,
            "source": source.description,
        },
        "nncf_version": nncf.__version__,
        "openvino_version": ov.__version__.split("-", 1)[0],
    }
    if not details["fake_quantize"]:
        warnings.append("NNCF quantized no op: the model has no op it quantizes.")
    return PassReport(output=target, details=details, warnings=warnings)


def quantized_reshaping(
    quantize: Callable[[Any], Any],
    converted: Any,
    samples: CalibrationSamples,
    warnings: list[str],
) -> Any:
    """`quantize` (nncf.quantize or its accuracy-controlled twin) on the converted model; where
    OpenVINO cannot infer it with dynamic shapes ('Squeeze operation with dynamic rank'), on the
    model reshaped to the calibration samples' static shapes, as the OpenVINO backend compiles
    it, said in a warning."""
    try:
        return quantize(converted)
    except Exception as exc:
        if "dynamic" not in str(exc) or not converted.is_dynamic():
            raise
        first = next(iter(samples))
        converted.reshape({name: list(array.shape) for name, array in first.items()})
        warnings.append(
            "OpenVINO could not run the model with dynamic shapes; it was quantized reshaped "
            f"to the calibration samples' shapes ({_shapes(first)}), so the IR runs at those."
        )
        return quantize(converted)


def _shapes(feed: dict[str, Any]) -> str:
    return ", ".join(f"{name} {'x'.join(map(str, array.shape))}" for name, array in feed.items())


def openvino_model(
    ov: Any, model: Path, proto: onnx.ModelProto
) -> tuple[Any, dict[str, int | None], list[str]]:
    """The model converted by OpenVINO, {"from": opset, "to": opset} and warnings: a model
    OpenVINO refuses at an opset older than 13 is converted to 13 first and tried again."""
    found = default_opset(proto)
    try:
        return ov.convert_model(str(model)), {"from": found, "to": found}, []
    except Exception as exc:  # OpenVINO's frontend raises its own untyped errors
        refusal = _refusal(exc)
        if found is None or found >= PER_CHANNEL_OPSET:
            raise _not_converted(refusal) from exc
    newer = _converted(ov, model, found, refusal)
    note = (
        f"OpenVINO could not convert the model at opset {found} ({refusal}); it was converted "
        f"to opset {PER_CHANNEL_OPSET} with onnx.version_converter first."
    )
    return newer, {"from": found, "to": PER_CHANNEL_OPSET}, [note]


def _converted(ov: Any, model: Path, found: int, refusal: str) -> Any:
    """OpenVINO's conversion of `model` at opset 13 (PassFailed if either step fails)."""
    try:
        newer = version_converter.convert_version(onnx.load(model), PER_CHANNEL_OPSET)
    except Exception as exc:  # the converter raises its own untyped errors
        raise _not_converted(
            f"{refusal}; onnx.version_converter could not take it from opset {found} to "
            f"{PER_CHANNEL_OPSET} either: {first_line(exc)}"
        ) from exc
    with tempfile.TemporaryDirectory(dir=model.parent) as folder:
        path = Path(folder) / "opset13.onnx"
        big = newer.ByteSize() > 2**31 - 2**27  # protobuf's limit, less room for the graph
        onnx.save_model(newer, path, save_as_external_data=big, location="opset13.onnx.data")
        try:
            return ov.convert_model(str(path))
        except Exception as exc:  # OpenVINO's frontend raises its own untyped errors
            raise _not_converted(f"{refusal}; at opset 13 too: {_refusal(exc)}") from exc


def _refusal(exc: Exception) -> str:
    """OpenVINO's reason in one line: the summary of a conversion that failed ('Conversion is
    failed for: Concat-1'), else its message without source locations."""
    message = runtime_message(exc)
    before, summary, after = message.partition("Summary:")
    return after.strip(" -") if summary and after.strip(" -") else message


def _not_converted(reason: str) -> PassFailed:
    return PassFailed(
        f"OpenVINO could not convert this model: {reason}",
        hint="Quantize it for ONNX Runtime instead (int8_static), or export it at a newer opset.",
    )


def openvino_types(types: list[str]) -> list[str]:
    """ignored_types in OpenVINO's names (ONNX names of OPENVINO_TYPES translated), in order."""
    named = [name for given in types for name in OPENVINO_TYPES.get(given, (given,))]
    return list(dict.fromkeys(named))


def _absent_types(model: Any, types: list[str]) -> list[str]:
    present = {op.get_type_name() for op in model.get_ops()}
    absent = [name for name in types if name not in present]
    if not absent:
        return []
    return [
        f"ignored_types names no op of the OpenVINO model: {', '.join(absent)} (its op types: "
        f"{', '.join(sorted(present))})."
    ]


def fake_quantize_details(model: Any) -> dict[str, Any]:
    """How many FakeQuantize ops NNCF inserted and the op types that read their outputs."""
    fakes = [op for op in model.get_ops() if op.get_type_name() == "FakeQuantize"]
    readers = Counter(
        target.get_node().get_type_name()
        for fake in fakes
        for target in fake.output(0).get_target_inputs()
    )
    readers.pop("FakeQuantize", None)
    return {"fake_quantize": len(fakes), "quantized_nodes": dict(sorted(readers.items()))}


def openvino_and_nncf() -> tuple[Any, Any]:
    """openvino and nncf, imported with NNCF_CI set; BackendUnavailable without them."""
    os.environ.setdefault("NNCF_CI", "1")  # before nncf is imported: no telemetry
    try:
        import nncf
        import openvino as ov
    except ImportError as exc:
        raise BackendUnavailable(
            f"NNCF INT8 on the OpenVINO model needs openvino and nncf ({exc}).",
            hint="pip install openvino nncf",
        ) from exc
    return ov, nncf


INT8_NNCF_OV = PassInfo(
    name="int8_nncf_ov",
    label="INT8 (NNCF on the OpenVINO model)",
    description=(
        "What OpenVINO's users do by default: the model converted by OpenVINO (any opset), "
        "then quantized by NNCF on OpenVINO's own graph, where its CPU plugin fuses the "
        "quantizers: ranges measured on calibration data, weights per channel, a bias "
        "correction that restores each layer's output mean. Writes an OpenVINO IR (.xml + "
        ".bin), which runs on OpenVINO only. Needs a few hundred representative inputs."
    ),
    config="optistudio.core.passes.nncf_openvino:NncfOpenVinoConfig",
    implementation="optistudio.core.passes.nncf_openvino:run_int8_nncf_ov",
    needs_calibration=True,
    produces_precision="int8",
)
