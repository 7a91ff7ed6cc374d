"""Per-layer quantization error as rows a chart can draw, each tied to the original ONNX graph.

The numbers come from `optistudio.core.numerics.sensitivity.layer_errors` (the ranking the int8_mixed pass uses):
worst first by the noise a layer adds. Each row adds where the node sits in the float model's
file: its position in `graph.node` (as Netron lists it), its op type, and the nodes feeding it,
so a culprit can be found in the model people exported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx

from optistudio.core.data.source import CalibrationSource
from optistudio.core.numerics.sensitivity import LayerError, layer_errors


def layer_error_rows(
    float_model: Path,
    quantized_model: Path,
    data: CalibrationSource,
    *,
    work_dir: Path,
    max_batches: int = 4,
) -> list[dict[str, Any]]:
    """One row per compared layer, worst first (rank 1), linked to the float graph's nodes."""
    errors = layer_errors(
        float_model, quantized_model, data, max_batches=max_batches, work_dir=work_dir
    )
    return link_to_graph(errors, onnx.load(float_model, load_external_data=False).graph)


def link_to_graph(errors: list[LayerError], graph: onnx.GraphProto) -> list[dict[str, Any]]:
    """Rows of `errors` (order kept) with each node's index and producers in `graph`."""
    index = {node.name: number for number, node in enumerate(graph.node)}
    producer = {out: node.name or node.op_type for node in graph.node for out in node.output}
    inputs = {node.name: [producer[i] for i in node.input if i in producer] for node in graph.node}
    return [
        {
            "rank": rank,
            "node": error.node,
            "op_type": error.op_type,
            "graph_index": index.get(error.node),
            "fed_by": inputs.get(error.node, []),
            "tensor": error.tensor,
            "quantized_node": error.quantized_node,
            "sqnr_db": error.sqnr_db,
            "cosine": error.cosine,
            "noise_added": error.noise_added,
            "noise_to_signal": error.noise_to_signal,
            "samples": error.samples,
        }
        for rank, error in enumerate(errors, start=1)
    ]
