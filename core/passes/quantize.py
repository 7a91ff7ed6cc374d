"""INT8 quantization passes on ONNX Runtime's quantizer: dynamic, and static (QDQ) with calibration.

int8_dynamic stores weights as INT8 and quantizes activations at run time (quantize_dynamic);
it needs no data. int8_static inserts QuantizeLinear/DequantizeLinear pairs whose activation
scales come from calibration data.

Memory: ONNX Runtime's histogram calibrators (Entropy, Percentile, Distribution) append every
batch's intermediate outputs to a list and only histogram them once the reader is exhausted, so
100 BERT batches hold tens of GB; and it has no MSE method. So every method's ranges come from
`optistudio.core.numerics.calibration` (one batch of activations in memory, a fixed-size histogram per tensor) and
ONNX Runtime only quantizes. The ranges reach it as a calibration cache
(`quantize_static(calibration_cache_path=...)`, which skips its calibration entirely) when the
installed version has that argument; older versions get them as `TensorQuantOverrides`
rmin/rmax, with their MinMax calibrator fed the first batch only (its ranges are overridden).
"""

from __future__ import annotations

import inspect
import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnx
from onnx.external_data_helper import uses_external_data
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.data.source import CalibrationSource
from optistudio.core.errors import PassFailed
from optistudio.core.machine.environment import int8_choice
from optistudio.core.numerics.calibration import collect_activation_stats, compute_ranges
from optistudio.core.passes.base import PassContext, PassInfo, PassReport
from optistudio.core.passes.prepare import (
    KEEP_FOR_DYNAMIC,
    already_quantized,
    finish_quantized,
    prepare_for_quantizer,
    quantizer_errors,
)
from optistudio.core.progress import scaled

logger = logging.getLogger(__name__)

CONV_WARNING = "dynamic quantization of convolutions is slow on CPUs; prefer int8_static for CNNs"
REPORTED_RANGES = 8
REPORTED_OPS = 8
_QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
_CACHE_NAME = "calibration_ranges.json"


class Int8DynamicConfig(BaseModel):
    """Options of int8_dynamic."""

    model_config = ConfigDict(extra="forbid")

    per_channel: bool = Field(
        True, description="One scale per output channel of each weight instead of per tensor."
    )
    reduce_range: bool | None = Field(
        None,
        description="Quantize weights to 7 bits. Default: decided by the CPU the pass runs on: "
        "on for x86 CPUs without VNNI/AMX, whose 8-bit kernels can saturate (ONNX Runtime's "
        "guidance), off elsewhere.",
    )
    weight_type: Literal["qint8", "quint8"] = Field(
        "qint8", description="Integer type of the quantized weights (signed or unsigned)."
    )
    op_types: list[str] | None = Field(
        None,
        description=(
            "Op types to quantize. Default: all ONNX Runtime quantizes dynamically "
            "(MatMul, Conv, Attention, LSTM, Gather, ...)."
        ),
    )
    nodes_to_exclude: list[str] = Field(
        default_factory=list, description="Names of nodes to keep in floating point."
    )
    preprocess: bool = Field(
        True,
        description="Prepare the graph first (optistudio.core.passes.prepare: unique node "
        "names, ONNX Runtime's shape inference and graph optimisation, MatMul + Add kept "
        "apart); quantization continues without it if it fails. The optimisation is skipped "
        "when nodes_to_exclude is set, because fusing renames nodes.",
    )


class Int8StaticConfig(BaseModel):
    """Options of int8_static."""

    model_config = ConfigDict(extra="forbid")

    calibration: Literal["minmax", "entropy", "percentile", "distribution", "mse"] = Field(
        "minmax",
        description=(
            "How activation ranges are chosen: minmax (observed range), entropy (TensorRT's "
            "KL divergence), percentile (clip the rarest |x|), distribution (symmetric max |x|), "
            "mse (minimise expected quantization error)."
        ),
    )
    percentile: float = Field(
        99.999, gt=0, le=100, description="Percentile of |x| kept by the percentile method."
    )
    per_channel: bool = Field(
        True, description="One scale per output channel of each weight instead of per tensor."
    )
    symmetric_activations: bool = Field(
        False, description="Symmetric activation ranges (zero point 0) instead of asymmetric."
    )
    symmetric_weights: bool = Field(True, description="Symmetric weight ranges (zero point 0).")
    reduce_range: bool | None = Field(
        None,
        description="Quantize weights to 7 bits. Default: decided by the CPU the pass runs on: "
        "on for x86 CPUs without VNNI/AMX, whose 8-bit kernels can saturate (ONNX Runtime's "
        "guidance), off elsewhere.",
    )
    op_types: list[str] | None = Field(
        None,
        description="Op types to quantize. Default: all ONNX Runtime quantizes in QDQ format.",
    )
    nodes_to_exclude: list[str] = Field(
        default_factory=list, description="Names of nodes to keep in floating point."
    )
    max_batches: int = Field(100, ge=1, description="At most this many calibration batches.")
    preprocess: bool = Field(
        True,
        description="Prepare the graph first (optistudio.core.passes.prepare: unique node "
        "names, ONNX Runtime's quantization pre-processing: shape inference, graph "
        "optimisation); quantization continues without it if it fails. The optimisation is "
        "skipped when nodes_to_exclude is set, because fusing renames nodes.",
    )


def run_int8_dynamic(
    model: Path, out: Path, config: Int8DynamicConfig, context: PassContext
) -> PassReport:
    """Quantize weights to INT8 and activations at run time with quantize_dynamic."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    context.progress(0.0, "pre-processing")
    prepared, warnings = _prepared(model, context, config.preprocess, config.nodes_to_exclude)
    context.progress(0.1, "quantizing weights")
    excluded = [*config.nodes_to_exclude, *already_quantized(prepared)]
    before = _op_counts(prepared)
    with quantizer_errors("quantize this model dynamically"):
        quantize_dynamic(
            prepared,
            out,
            op_types_to_quantize=config.op_types,
            per_channel=config.per_channel,
            reduce_range=reduced_range(config.reduce_range),
            weight_type=QuantType.QInt8 if config.weight_type == "qint8" else QuantType.QUInt8,
            nodes_to_exclude=excluded,
            use_external_data_format=_uses_external_data(prepared),
        )
    warnings += finish_quantized(out, "dynamic INT8", original=model)
    context.progress(1.0, "quantized")
    replaced = _replaced_ops(before, _op_counts(out))
    details = {
        "preprocessed": prepared != model,
        "quantized_nodes": replaced,
        "reduce_range": describe_range(config.reduce_range),
        **_common_details(model, out),
    }
    warnings += _exclusion_warnings(model, config.nodes_to_exclude)
    warnings += _dynamic_warnings(before, config, replaced)
    return PassReport(output=out, details=details, warnings=warnings)


def _prepared(
    model: Path, context: PassContext, preprocess: bool, excluded: list[str]
) -> tuple[Path, list[str]]:
    """The graph to quantize dynamically: prepared (optistudio.core.passes.prepare) unless
    `preprocess` is off; nodes excluded by name keep their names (no graph optimisation)."""
    if not preprocess:
        return model, []
    folder = context.work_dir / "prepared"
    found = prepare_for_quantizer(
        model, folder, optimize=not excluded, keep_fusions=KEEP_FOR_DYNAMIC
    )
    return found.path, found.notes


def reduced_range(asked: bool | None) -> bool:
    """7-bit weights as asked, or as this CPU needs (core.machine.environment.int8_choice)."""
    return int8_choice().reduce_range if asked is None else asked


def describe_range(asked: bool | None) -> str:
    """What was chosen for the weights' range and why, for the variant's report."""
    if asked is not None:
        return f"{'7' if asked else '8'}-bit weights, as asked"
    choice = int8_choice()
    return f"{choice.weights} weights: {choice.reason}"


def _dynamic_warnings(
    before: Counter[str], config: Int8DynamicConfig, replaced: dict[str, int]
) -> list[str]:
    warnings = []
    if before["Conv"] and (config.op_types is None or "Conv" in config.op_types):
        warnings.append(CONV_WARNING)
    if not replaced:
        warnings.append("No node was quantized: the model has none of the op types quantized.")
    return warnings


def run_int8_static(
    model: Path, out: Path, config: Int8StaticConfig, context: PassContext
) -> PassReport:
    """Calibrate activation ranges by streaming, then quantize to QDQ INT8 with ONNX Runtime."""
    source = context.require_calibration("static INT8")
    context.work_dir.mkdir(parents=True, exist_ok=True)
    context.progress(0.0, "pre-processing")
    prepared, warnings = _preprocess(model, context.work_dir, config)
    prepared, config, opset_notes = _per_channel_ready(prepared, context.work_dir, config)
    warnings += opset_notes
    op_types = config.op_types or _default_static_op_types()
    stats = collect_activation_stats(
        prepared,
        source,
        progress=scaled(context.progress, 0.1, 0.8),
        op_types=op_types,
        max_batches=config.max_batches,
        work_dir=context.work_dir,
    )
    if not stats.collectors:
        raise _nothing_to_quantize(prepared, config.op_types)
    ranges = compute_ranges(config.calibration, stats.collectors, config.percentile)
    context.progress(0.8, "quantizing")
    handover = _quantize_with_ranges(prepared, out, ranges, config, op_types, source, context)
    warnings += finish_quantized(out, "static INT8", original=model)
    context.progress(1.0, "quantized")
    details = {
        "preprocessed": prepared != model,
        "calibration": _calibration_details(config, stats.batches, len(ranges), source),
        "ranges": {name: list(pair) for name, pair in list(ranges.items())[:REPORTED_RANGES]},
        "ranges_handed_over_as": handover,
        "reduce_range": describe_range(config.reduce_range),
        "quantized_nodes": _dequantized_consumers(out),
        "qdq_nodes": {op: _op_counts(out)[op] for op in _QDQ_OPS},
        **_common_details(model, out),
    }
    warnings += _exclusion_warnings(model, config.nodes_to_exclude)
    return PassReport(output=out, details=details, warnings=warnings)


def _nothing_to_quantize(model: Path, asked: list[str] | None) -> PassFailed:
    """The model has no node of the op types to quantize with a float input or output."""
    ops = sorted(_op_counts(model))
    shown = ", ".join(ops[:REPORTED_OPS]) + (", ..." if len(ops) > REPORTED_OPS else "")
    which = f"among op_types ({', '.join(asked)})" if asked else "one static INT8 quantizes"
    return PassFailed(
        f"Static INT8 has nothing to quantize in this model: none of its ops ({shown}) is "
        f"{which} with a float tensor to calibrate.",
        hint="Keep this model in float (the graph or fp16 recipes), or set op_types to op types "
        "the model has.",
    )


def _preprocess(model: Path, work_dir: Path, config: Int8StaticConfig) -> tuple[Path, list[str]]:
    """The graph prepared for the quantizer (optistudio.core.passes.prepare); its graph
    optimisation renames fused nodes, so it is skipped when nodes are excluded by name."""
    if not config.preprocess:
        return model, []
    found = prepare_for_quantizer(
        model, work_dir / "prepared", optimize=not config.nodes_to_exclude
    )
    return found.path, found.notes


PER_CHANNEL_MIN_OPSET = 13


def _per_channel_ready(
    model: Path, work_dir: Path, config: Int8StaticConfig
) -> tuple[Path, Int8StaticConfig, list[str]]:
    """Per-channel QDQ needs DequantizeLinear's `axis` (opset 13): upgrade older models, or
    fall back to per-tensor scales when the upgrade fails, and say which happened."""
    import onnx

    proto = onnx.load(model, load_external_data=False)
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
    if not config.per_channel or opset >= PER_CHANNEL_MIN_OPSET:
        return model, config, []
    try:
        upgraded = onnx.version_converter.convert_version(onnx.load(model), PER_CHANNEL_MIN_OPSET)
        onnx.checker.check_model(upgraded)
    except Exception as exc:  # the converter raises untyped errors
        note = (
            f"The model's opset {opset} has no per-channel DequantizeLinear and could not "
            f"be upgraded to {PER_CHANNEL_MIN_OPSET} ({exc}); quantized per tensor instead."
        )
        return model, config.model_copy(update={"per_channel": False}), [note]
    target = work_dir / f"opset{PER_CHANNEL_MIN_OPSET}.onnx"
    onnx.save(upgraded, target)
    note = f"Upgraded the model from opset {opset} to {PER_CHANNEL_MIN_OPSET} for per-channel INT8."
    return target, config, [note]


def _default_static_op_types() -> list[str]:
    """What quantize_static quantizes when given no op types (QOperator and QDQ registries)."""
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    return sorted(set(QLinearOpsRegistry) | set(QDQRegistry))


def _quantize_with_ranges(
    model: Path,
    out: Path,
    ranges: dict[str, tuple[float, float]],
    config: Int8StaticConfig,
    op_types: list[str],
    source: CalibrationSource,
    context: PassContext,
) -> str:
    """Quantize with precomputed ranges; returns how they were handed to ONNX Runtime."""
    from onnxruntime.quantization import quantize_static

    options = _static_options(model, config, op_types)
    if _ort_reads_range_cache():
        cache = _write_range_cache(ranges, context.work_dir / _CACHE_NAME)
        with quantizer_errors("quantize this model statically"):
            quantize_static(model, out, None, calibration_cache_path=cache, **options)
        return "calibration_cache"
    options["extra_options"]["TensorQuantOverrides"] = _range_overrides(ranges)
    with quantizer_errors("quantize this model statically"):
        quantize_static(model, out, _FirstBatchReader(source, model), **options)
    return "tensor_quant_overrides"


def _ort_reads_range_cache() -> bool:
    from onnxruntime.quantization import quantize_static

    return "calibration_cache_path" in inspect.signature(quantize_static).parameters


def _static_options(model: Path, config: Int8StaticConfig, op_types: list[str]) -> dict[str, Any]:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType

    return {
        "quant_format": QuantFormat.QDQ,
        "op_types_to_quantize": op_types,
        "per_channel": config.per_channel,
        "reduce_range": reduced_range(config.reduce_range),
        "activation_type": QuantType.QInt8,
        "weight_type": QuantType.QInt8,
        "nodes_to_exclude": [*config.nodes_to_exclude, *already_quantized(model)],
        "use_external_data_format": _uses_external_data(model),
        "calibrate_method": CalibrationMethod.MinMax,
        "extra_options": {
            "ActivationSymmetric": config.symmetric_activations,
            "WeightSymmetric": config.symmetric_weights,
        },
    }


def _write_range_cache(ranges: dict[str, tuple[float, float]], path: Path) -> Path:
    from onnxruntime.quantization.calibrate import (
        CalibrationMethod,
        TensorsData,
        save_tensors_data,
    )

    pairs = {name: (np.float32(low), np.float32(high)) for name, (low, high) in ranges.items()}
    path.unlink(missing_ok=True)
    save_tensors_data(TensorsData(CalibrationMethod.MinMax, pairs), path)
    return path


def _range_overrides(ranges: dict[str, tuple[float, float]]) -> dict[str, list[dict[str, Any]]]:
    return {
        name: [{"rmin": np.array(low, np.float32), "rmax": np.array(high, np.float32)}]
        for name, (low, high) in ranges.items()
    }


class _FirstBatchReader:
    """A CalibrationDataReader that yields only the source's first batch."""

    def __init__(self, source: CalibrationSource, model: Path) -> None:
        graph = onnx.load(model, load_external_data=False).graph
        constants = {init.name for init in graph.initializer}
        names = [value.name for value in graph.input if value.name not in constants]
        first = next(iter(source.batches()))
        self._batches: Iterator[dict[str, np.ndarray]] = iter([{n: first[n] for n in names}])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._batches, None)


def _uses_external_data(model: Path) -> bool:
    graph = onnx.load(model, load_external_data=False).graph
    return any(uses_external_data(init) for init in graph.initializer)


def _op_counts(model: Path) -> Counter[str]:
    return Counter(node.op_type for node in onnx.load(model, load_external_data=False).graph.node)


def _replaced_ops(before: Counter[str], after: Counter[str]) -> dict[str, int]:
    """Op types whose nodes the quantizer replaced (e.g. MatMul by MatMulInteger), with counts."""
    return {op: count - after[op] for op, count in sorted(before.items()) if after[op] < count}


def _dequantized_consumers(model: Path) -> dict[str, int]:
    """Op types of the nodes (other than Q/DQ) whose every input is a DequantizeLinear output."""
    graph = onnx.load(model, load_external_data=False).graph
    dequantized = {name for n in graph.node if n.op_type == "DequantizeLinear" for name in n.output}
    ops = [
        node.op_type
        for node in graph.node
        if node.input
        and node.op_type not in _QDQ_OPS
        and dequantized.issuperset(filter(None, node.input))
    ]
    return dict(sorted(Counter(ops).items()))


def _calibration_details(
    config: Int8StaticConfig, batches: int, tensors: int, source: CalibrationSource
) -> dict[str, Any]:
    details: dict[str, Any] = {
        "method": config.calibration,
        "batches": batches,
        "tensors": tensors,
        "source": source.description,
    }
    if config.calibration == "percentile":
        details["percentile"] = config.percentile
    return details


def _common_details(model: Path, out: Path) -> dict[str, Any]:
    return {"size_bytes": {"before": _total_size(model), "after": _total_size(out)}}


def _total_size(model: Path) -> int:
    data = model.with_name(f"{model.name}.data")
    return model.stat().st_size + (data.stat().st_size if data.exists() else 0)


def _exclusion_warnings(model: Path, excluded: list[str]) -> list[str]:
    names = {node.name for node in onnx.load(model, load_external_data=False).graph.node}
    unknown = [name for name in excluded if name not in names]
    return [f"nodes_to_exclude names no node of the model: {', '.join(unknown)}"] if unknown else []


INT8_DYNAMIC = PassInfo(
    name="int8_dynamic",
    label="INT8 dynamic quantization",
    description=(
        "Stores MatMul/Conv/Attention weights as INT8 and quantizes activations on the fly at "
        "run time, so it needs no calibration data. Best for transformers and RNNs on CPU; "
        "about 4x smaller weights. Convolutions gain little or get slower: prefer static INT8."
    ),
    config="optistudio.core.passes.quantize:Int8DynamicConfig",
    implementation="optistudio.core.passes.quantize:run_int8_dynamic",
    needs_calibration=False,
    produces_precision="int8",
)

INT8_STATIC = PassInfo(
    name="int8_static",
    label="INT8 static quantization (QDQ)",
    description=(
        "Quantizes weights and activations to INT8 with fixed scales measured on calibration "
        "data (minmax, entropy, percentile, distribution or mse ranges), written as "
        "QuantizeLinear/DequantizeLinear pairs that ONNX Runtime, TensorRT and OpenVINO fuse "
        "into integer kernels. Fastest INT8 for CNNs; needs a few hundred representative inputs."
    ),
    config="optistudio.core.passes.quantize:Int8StaticConfig",
    implementation="optistudio.core.passes.quantize:run_int8_static",
    needs_calibration=True,
    produces_precision="int8",
)
