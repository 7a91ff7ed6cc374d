"""INT8 post-training quantization with NNCF (OpenVINO's toolkit), on its ONNX backend.

NNCF measures activation ranges on calibration data (min/max by default, with its per-op
hardware rules for OpenVINO), inserts QuantizeLinear/DequantizeLinear pairs, and corrects the
shift quantization adds to each layer's output mean (fast bias correction). The result is a
QDQ ONNX file: OpenVINO runs its quantized layers in INT8; ONNX Runtime runs it too, but the
placement follows OpenVINO's fusion rules, so it may be slower there than int8_static.

Calibration samples: when every model input has a dynamic leading (batch) dim, each batch
from the source is split into single rows, as NNCF recommends (its statistics then see one
sample per inference); otherwise whole feeds are given, each counting as one sample. Either
way at most `subset_size` samples are read, and each pass NNCF makes over the data starts
the source over.

Opset: Q/DQ take per-channel scales only from opset 13 on, and NNCF quantizes the weights of an
opset 10-12 model per tensor (one scale for all of a Conv's filters); below opset 10 its ONNX
backend refuses the model ("ONNX models with opset version < 10 do not support quantization").
Such a model is converted to opset 13 first (onnx.version_converter; below 10 the step's
warnings say so), so its weights get one scale per output channel, as NNCF gives an OpenVINO
model (PP-OCRv4's detector, opset 12, 16 rendered pages on OpenVINO: binarised-map IoU with
FP32 0.940 -> 0.955, cosine 0.977 -> 0.984; bench/det_int8_probe.py). An opset 10-12 model that
does not convert is quantized as it is, with a warning; an older one fails with the converter's
reason (int8_nncf_ov quantizes the OpenVINO model instead, which takes any opset).
NNCF reads a model's opset from its first opset import: a file importing ai.onnx.ml (or
com.microsoft) before the default domain reads as "opset 1" and was refused for its opset, so
the default domain's entry is put first. An opset refusal that still comes from NNCF says how
to get past it, not which op types to keep in float.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnx
from onnx import version_converter
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.data.source import CalibrationSource
from optistudio.core.errors import DataMismatch, OptistudioError, PassFailed, first_line
from optistudio.core.passes.base import PassContext, PassInfo, PassReport

logger = logging.getLogger(__name__)

OPENVINO_WARNING = (
    "Quantized by NNCF for OpenVINO: quantizers sit where OpenVINO fuses them, so ONNX Runtime "
    "may run this model slower than an int8_static one."
)
_QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
_EXTERNAL_DATA_BYTES = 2**31 - 2**27
PER_CHANNEL_OPSET = 13
"""The first opset whose QuantizeLinear/DequantizeLinear take an axis (per-channel scales)."""
NNCF_MIN_OPSET = 10
"""Below this NNCF refuses the model; its own error says so."""


class NncfConfig(BaseModel):
    """Options of int8_nncf."""

    model_config = ConfigDict(extra="forbid")

    preset: Literal["performance", "mixed"] = Field(
        "performance",
        description="performance: symmetric weights and activations (fastest); mixed: "
        "asymmetric activations, for activations not centred on zero (e.g. after GELU).",
    )
    subset_size: int = Field(300, ge=1, description="Calibration samples NNCF measures.")
    fast_bias_correction: bool = Field(
        True,
        description="Correct each quantized layer's output mean with one cheap pass; off uses "
        "NNCF's slower, more exact bias correction.",
    )
    activation_ranges: Literal["mean", "global"] = Field(
        "mean",
        description="How each activation's range is taken from the calibration samples: mean "
        "(NNCF's default) averages the min and max each calibration batch saw, so it clips "
        "the extremes of single samples and depends on how samples are batched; global takes "
        "the min and max over all of them, so no value seen in calibration is clipped.",
    )
    model_type: Literal["default", "transformer"] = Field(
        "default",
        description="transformer keeps attention's sensitive ops (softmax, layer norm, ...) in "
        "float and applies smooth quant.",
    )
    ignored_types: list[str] = Field(
        default_factory=list, description="Op types kept in float, e.g. ['Add', 'Gemm']."
    )


def run_int8_nncf(model: Path, out: Path, config: NncfConfig, context: PassContext) -> PassReport:
    """Quantize to QDQ INT8 with nncf.quantize, calibrating on the context's data."""
    source = context.require_calibration("NNCF INT8")
    os.environ.setdefault("NNCF_CI", "1")  # before nncf is imported: no telemetry
    import nncf

    proto, opset, warnings = per_channel_opset(onnx.load(model))
    default_domain_first(proto)
    warnings += _ignored_type_warnings(proto, config.ignored_types)
    if context.target_backend != "openvino":  # the warning is for a variant run elsewhere
        warnings.insert(0, OPENVINO_WARNING)
    samples = CalibrationSamples(source, proto, config.subset_size, context)
    context.progress(0.0, "calibrating with NNCF")
    with nncf_errors():
        quantized = nncf.quantize(proto, nncf.Dataset(samples), **quantize_options(config))
    context.progress(0.95, "saving")
    _save(quantized, out)
    onnx.checker.check_model(out)
    context.progress(1.0, "quantized")
    details = {
        **_qdq_details(out),
        "preset": config.preset,
        "activation_ranges": config.activation_ranges,
        "model_type": config.model_type,
        "opset": opset,
        "calibration": {
            "samples": samples.used,
            "split_batches": samples.split,
            "source": source.description,
        },
        "nncf_version": nncf.__version__,
    }
    if not details["qdq_nodes"]["QuantizeLinear"]:
        warnings.append("NNCF quantized no node: the model has no op it quantizes.")
    return PassReport(output=out, details=details, warnings=warnings)


def per_channel_opset(
    proto: onnx.ModelProto,
) -> tuple[onnx.ModelProto, dict[str, int | None], list[str]]:
    """The model at opset 13 when it is older, so NNCF takes it and scales weights per channel.

    Returns the model, {"from": opset, "to": opset} and warnings (one saying so when the model
    was below NNCF's opset 10). An opset 10-12 model that fails to convert is kept as it is,
    with a warning; an older one is PassFailed with the converter's reason.
    """
    found = default_opset(proto)
    if found is None or found >= PER_CHANNEL_OPSET:
        return proto, {"from": found, "to": found}, []
    try:
        converted = version_converter.convert_version(proto, PER_CHANNEL_OPSET)
    except Exception as exc:  # the converter raises its own untyped errors
        if found < NNCF_MIN_OPSET:
            raise PassFailed(
                f"NNCF's ONNX backend takes opset {NNCF_MIN_OPSET} or later, and this model's "
                f"opset {found} could not be converted to {PER_CHANNEL_OPSET} "
                f"({first_line(exc)}).",
                hint=OPSET_HINT,
            ) from exc
        warning = (
            f"The model's opset {found} has no per-channel INT8 weights and it could not be "
            f"converted to opset {PER_CHANNEL_OPSET} ({first_line(exc)}), so its weights are "
            "quantized per tensor, which costs accuracy; export it at opset 13 or later."
        )
        return proto, {"from": found, "to": found}, [warning]
    # An IR 3 file must list its initializers as inputs, and NNCF adds scales that are not.
    minimum = onnx.helper.find_min_ir_version_for(list(converted.opset_import))
    converted.ir_version = max(converted.ir_version, minimum)
    return converted, {"from": found, "to": PER_CHANNEL_OPSET}, _converted_note(found)


def _converted_note(found: int) -> list[str]:
    if found >= NNCF_MIN_OPSET:
        return []
    return [
        f"Converted from opset {found} to {PER_CHANNEL_OPSET} with onnx.version_converter "
        f"before quantizing: NNCF's ONNX backend takes opset {NNCF_MIN_OPSET} or later."
    ]


def default_domain_first(proto: onnx.ModelProto) -> None:
    """Put the default domain's opset import first, where NNCF reads the model's opset."""
    imports = sorted(proto.opset_import, key=lambda entry: entry.domain not in ("", "ai.onnx"))
    if list(imports) != list(proto.opset_import):
        del proto.opset_import[:]
        proto.opset_import.extend(imports)


def default_opset(proto: onnx.ModelProto) -> int | None:
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)


def quantize_options(config: NncfConfig, ignored_names: Sequence[str] = ()) -> dict[str, Any]:
    """nncf.quantize's keywords for `config`, with the ops named `ignored_names` kept in float."""
    import nncf

    return {
        "preset": nncf.QuantizationPreset(config.preset),
        "subset_size": config.subset_size,
        "fast_bias_correction": config.fast_bias_correction,
        "model_type": nncf.ModelType.TRANSFORMER if config.model_type == "transformer" else None,
        # validate=False: a type the model lacks is a warning of ours, not NNCF's error.
        "ignored_scope": nncf.IgnoredScope(
            names=list(ignored_names), types=list(config.ignored_types), validate=False
        ),
        **_activation_ranges(nncf, config.activation_ranges),
    }


def _activation_ranges(nncf: Any, ranges: str) -> dict[str, Any]:
    """NNCF's advanced parameters for `ranges` (NncfConfig.activation_ranges); none for its
    default."""
    if ranges == "mean":
        return {}
    from nncf.quantization.range_estimator import RangeEstimatorParametersSet

    return {
        "advanced_parameters": nncf.AdvancedQuantizationParameters(
            activations_range_estimator_params=RangeEstimatorParametersSet.MINMAX
        )
    }


class CalibrationSamples:
    """An iterable of feed dicts for nncf.Dataset: every iteration restarts the source and
    stops after `limit` samples (single rows when the batch dim is dynamic)."""

    def __init__(
        self, source: CalibrationSource, proto: onnx.ModelProto, limit: int, context: PassContext
    ) -> None:
        self._source = source
        self._inputs = _feed_names(proto.graph)
        self._limit = limit
        self._progress = context.progress
        self.split = _dynamic_batch(proto.graph, self._inputs)
        self.used = 0

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        samples = itertools.islice(self._samples(), self._limit)
        for count, sample in enumerate(samples, start=1):
            self.used = max(self.used, count)
            yield sample
        if self.used == 0:
            raise DataMismatch(f"The calibration data ({self._source.description}) is empty.")

    def _samples(self) -> Iterator[dict[str, np.ndarray]]:
        for number, batch in enumerate(self._source.batches(), start=1):
            feed = self._feed(batch, number)
            yield from _rows(feed) if self.split else [feed]
            self._progress(0.9 * min(1.0, self.used / self._limit), f"calibration batch {number}")

    def _feed(self, batch: dict[str, np.ndarray], number: int) -> dict[str, np.ndarray]:
        missing = [name for name in self._inputs if name not in batch]
        if missing:
            raise DataMismatch(
                f"Calibration batch {number} lacks input(s) {', '.join(missing)}; the model "
                f"expects {', '.join(self._inputs)} and the batch has {', '.join(batch)}."
            )
        return {name: np.asarray(batch[name]) for name in self._inputs}


def _feed_names(graph: onnx.GraphProto) -> list[str]:
    constants = {init.name for init in graph.initializer}
    return [value.name for value in graph.input if value.name not in constants]


def _dynamic_batch(graph: onnx.GraphProto, names: list[str]) -> bool:
    """Whether every input's leading dim is symbolic or unknown (so rows can be fed alone)."""
    shapes = {v.name: v.type.tensor_type.shape for v in graph.input if v.name in names}
    return all(shapes[name].dim and not shapes[name].dim[0].HasField("dim_value") for name in names)


def _rows(feed: dict[str, np.ndarray]) -> Iterator[dict[str, np.ndarray]]:
    """One feed per row; a feed whose inputs disagree on the row count is kept whole."""
    counts = {array.shape[0] if array.ndim else -1 for array in feed.values()}
    if len(counts) != 1 or -1 in counts:
        yield feed
        return
    for row in range(counts.pop()):
        yield {name: array[row : row + 1] for name, array in feed.items()}


@contextmanager
def nncf_errors() -> Iterator[None]:
    """NNCF's failures (its own errors and those of the ONNX Runtime it calibrates with)."""
    try:
        yield
    except OptistudioError:
        raise
    except Exception as exc:
        raise PassFailed(
            f"NNCF could not quantize this model: {type(exc).__name__}: {first_line(exc)}",
            hint=OPSET_HINT if "opset" in str(exc).lower() else FAILURE_HINT,
        ) from exc


FAILURE_HINT = (
    "Keep the failing op types in float (ignored_types), try the 'mixed' preset, or use "
    "int8_static."
)
OPSET_HINT = (
    "Use int8_nncf_ov (NNCF on the OpenVINO model takes any opset), or export the model at "
    f"opset {PER_CHANNEL_OPSET} or later."
)


def _save(proto: onnx.ModelProto, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    big = sum(len(init.raw_data) for init in proto.graph.initializer) > _EXTERNAL_DATA_BYTES
    onnx.save_model(proto, path, save_as_external_data=big, location=f"{path.name}.data")


def _qdq_details(model: Path) -> dict[str, Any]:
    """Q/DQ counts and the op types of the nodes that consume a DequantizeLinear output."""
    graph = onnx.load(model, load_external_data=False).graph
    ops = Counter(node.op_type for node in graph.node)
    dequantized = {name for n in graph.node if n.op_type == "DequantizeLinear" for name in n.output}
    wrapped = Counter(
        node.op_type
        for node in graph.node
        if node.op_type not in _QDQ_OPS and dequantized.intersection(node.input)
    )
    return {
        "qdq_nodes": {op: ops[op] for op in _QDQ_OPS},
        "quantized_nodes": dict(sorted(wrapped.items())),
    }


def _ignored_type_warnings(proto: onnx.ModelProto, ignored: list[str]) -> list[str]:
    present = {node.op_type for node in proto.graph.node}
    absent = [op for op in ignored if op not in present]
    return [f"ignored_types names no op of the model: {', '.join(absent)}"] if absent else []


INT8_NNCF = PassInfo(
    name="int8_nncf",
    label="INT8 (NNCF post-training quantization)",
    description=(
        "Quantizes weights and activations to INT8 with NNCF, OpenVINO's compression toolkit: "
        "ranges measured on calibration data, quantizers placed by OpenVINO's fusion rules, "
        "then a bias correction that restores each layer's output mean. Writes QDQ ONNX; "
        "best for models served with OpenVINO (ONNX Runtime may run it slower). Needs a few "
        "hundred representative inputs."
    ),
    config="optistudio.core.passes.nncf_quantize:NncfConfig",
    implementation="optistudio.core.passes.nncf_quantize:run_int8_nncf",
    needs_calibration=True,
    produces_precision="int8",
)
