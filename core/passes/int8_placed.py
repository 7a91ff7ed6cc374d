"""int8_placed: static INT8 kept only on the nodes where it is faster than FP32 on this CPU.

1. The graph is prepared and quantized as int8_static does (optistudio.core.passes.prepare,
   the same calibration), every node it quantizes in INT8.
2. The prepared float graph and that INT8 graph are timed node by node on ONNX Runtime at one
   thread on the first calibration batches (optistudio.core.passes.placement_times: medians
   over a few runs, each Q/DQ node's time given to the nodes it serves).
3. A node keeps INT8 when its INT8 time, Q/DQ included, is below FP32's by the margin
   (optistudio.core.passes.placement: a pure function of the times).
4. The prepared graph is quantized again with the other nodes in `nodes_to_exclude`, and those
   are made to read float (optistudio.core.passes.float_nodes): ONNX Runtime's quantizer would
   feed them DequantizeLinear outputs, which the runtime fuses back into INT8 kernels.

When no timed node pays, or every one does (the variant would be int8_static's), the pass does
not apply to this graph (GraphNotApplicable, listed apart from failures), with the sentence
that says which. The node times are one machine's at one thread; the variant is then judged and
timed whole like any other, which is what decides whether it is kept.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import onnx
from pydantic import Field

from optistudio.core.data.source import CalibrationSource
from optistudio.core.passes.base import PassContext, PassInfo, PassReport
from optistudio.core.passes.float_nodes import keep_float
from optistudio.core.passes.int8_options import StaticInt8Options
from optistudio.core.passes.placement import NodeCost, Placement, place_int8, refusal
from optistudio.core.passes.placement_times import Feeds, node_costs, quantized_nodes
from optistudio.core.passes.prepare import (
    QDQ_OPS,
    GraphNotApplicable,
    finish_quantized,
    prepare_for_quantizer,
    uses_external,
)
from optistudio.core.passes.quantize import Int8StaticConfig, run_int8_static
from optistudio.core.progress import scaled

REPORTED_NODES = 12
_EXTERNAL_DATA_BYTES = 2**31 - 2**27


class Int8PlacedConfig(StaticInt8Options):
    """Options of int8_placed."""

    margin: float = Field(
        0.1,
        ge=0,
        lt=1,
        description="A node keeps INT8 when its INT8 time (Q/DQ included) is below (1 - margin) "
        "times its FP32 time.",
    )
    timing_runs: int = Field(10, ge=3, le=1000, description="Profiled runs per graph (medians).")
    warmup_runs: int = Field(3, ge=0, le=100, description="Runs per graph before those timed.")
    timing_batches: int = Field(
        2, ge=1, le=64, description="First calibration batches the timed runs feed in turn."
    )
    max_batches: int = Field(100, ge=1, description="At most this many calibration batches.")


def run_int8_placed(
    model: Path, out: Path, config: Int8PlacedConfig, context: PassContext
) -> PassReport:
    """Static INT8 on the nodes where it pays; see the module docstring."""
    source = context.require_calibration("INT8 placement")
    work = context.work_dir / "int8_placed"
    context.progress(0.0, "pre-processing")
    prepared = prepare_for_quantizer(model, work / "prepared")
    full = _quantized(prepared.path, work / "full", [], config, context, (0.0, 0.4))
    context.progress(0.4, "timing FP32 and INT8 node by node at one thread")
    costs = node_costs(
        prepared.path,
        full.output,
        first_feeds(source, prepared.path, config.timing_batches),
        runs=config.timing_runs,
        warmup=config.warmup_runs,
        work_dir=work / "timing",
    )
    placement = place_int8(costs, margin=config.margin)
    why = refusal(placement)
    if why is not None:
        raise GraphNotApplicable(
            f"Not applicable to this graph: {why}",
            hint="int8_static quantizes every node; the other recipes still apply.",
        )
    notes = quantize_placed(prepared.path, out, placement.fp32, config, context)
    if not quantized_nodes(onnx.load(out, load_external_data=False).graph):
        out.unlink()
        out.with_name(f"{out.name}.data").unlink(missing_ok=True)
        raise GraphNotApplicable(
            "Not applicable to this graph: the nodes where INT8 paid were left with no INT8 "
            f"node once the others went back to FP32 ({placement.note()})",
            hint="int8_static quantizes every node; the other recipes still apply.",
        )
    warnings = [placement.note(), *prepared.notes, *notes]
    return PassReport(
        output=out, details=_details(placement, costs, config, out), warnings=warnings
    )


def quantize_placed(
    prepared: Path, out: Path, fp32_nodes: list[str], config: Int8PlacedConfig, context: PassContext
) -> list[str]:
    """`prepared` quantized as int8_static with `fp32_nodes` excluded and made to read float
    (optistudio.core.passes.float_nodes), written to `out`; returns the notes."""
    folder = context.work_dir / "int8_placed" / "placed"
    placed = _quantized(prepared, folder, fp32_nodes, config, context, (0.6, 1.0))
    _save_float_kept(placed.output, out, set(fp32_nodes))
    return [*placed.warnings, *finish_quantized(out, "INT8 placement")]


def first_feeds(source: CalibrationSource, model: Path, count: int) -> list[Feeds]:
    """The first `count` calibration batches, each cut to the model's graph inputs."""
    graph = onnx.load(model, load_external_data=False).graph
    constants = {init.name for init in graph.initializer}
    names = [value.name for value in graph.input if value.name not in constants]
    batches = itertools.islice(source.batches(), count)
    return [{name: batch[name] for name in names} for batch in batches]


def _quantized(
    prepared: Path,
    folder: Path,
    excluded: list[str],
    config: Int8PlacedConfig,
    context: PassContext,
    span: tuple[float, float],
) -> PassReport:
    """int8_static on the prepared graph with `excluded` in nodes_to_exclude."""
    static = Int8StaticConfig(
        calibration=config.calibration,
        per_channel=config.per_channel,
        reduce_range=config.reduce_range,
        nodes_to_exclude=excluded,
        max_batches=config.max_batches,
        preprocess=False,
    )
    inner = PassContext(
        work_dir=folder,
        target_backend=context.target_backend,
        calibration=context.calibration,
        progress=scaled(context.progress, *span),
    )
    return run_int8_static(prepared, folder / "model.onnx", static, inner)


def _save_float_kept(quantized: Path, out: Path, excluded: set[str]) -> None:
    """The quantized model with the excluded nodes reading float, written to `out`."""
    proto = onnx.load(quantized)
    keep_float(proto, excluded)
    weights = sum(len(init.raw_data) for init in proto.graph.initializer)
    big = uses_external(quantized) or weights > _EXTERNAL_DATA_BYTES
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(proto, out, save_as_external_data=big, location=f"{out.name}.data")


def _details(
    placement: Placement, costs: list[NodeCost], config: Int8PlacedConfig, out: Path
) -> dict[str, Any]:
    graph = onnx.load(out, load_external_data=False).graph
    slowest = sorted(costs, key=lambda c: -max(c.fp32_us, c.int8_us))[:REPORTED_NODES]
    return {
        "placement": placement.note(),
        "int8_nodes": len(placement.int8),
        "fp32_nodes": placement.fp32,
        "fp32_op_types": placement.fp32_op_types,
        "margin": config.margin,
        "timing": {"threads": 1, "runs": config.timing_runs, "batches": config.timing_batches},
        "node_times_us": [
            {"node": c.name, "op_type": c.op_type, "fp32": c.fp32_us, "int8": c.int8_us}
            for c in slowest
        ],
        "qdq_nodes": {op: sum(n.op_type == op for n in graph.node) for op in sorted(QDQ_OPS)},
    }


INT8_PLACED = PassInfo(
    name="int8_placed",
    label="INT8 where it pays",
    description=(
        "Static INT8 (QDQ, quantized and calibrated as int8_static) kept only on the layers "
        "where it is faster on this CPU: the FP32 and INT8 graphs are timed node by node at one "
        "thread, each quantized node's INT8 time with its Quantize/Dequantize nodes against its "
        "FP32 time, and the nodes where INT8 does not pay by a margin go back to FP32. Not "
        "applicable when no node pays or every one does (that is int8_static)."
    ),
    config="optistudio.core.passes.int8_placed:Int8PlacedConfig",
    implementation="optistudio.core.passes.int8_placed:run_int8_placed",
    needs_calibration=True,
    produces_precision="mixed",
)
