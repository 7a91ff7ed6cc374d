"""Per-layer quantization error as rows a chart can draw, each tied to the original ONNX graph.

The numbers come from `optistudio.core.numerics.sensitivity.layer_errors` (the ranking the int8_mixed pass uses):
worst first by the noise a layer adds. Each row adds where the node sits in the float model's
file: its position in `graph.node` (as Netron lists it), its op type, and the nodes feeding it,
so a culprit can be found in the model people exported.

Nodes are found by the tensor they produce, never by name: exporters often leave names empty
(every node then has the name ""), and a name need not be unique. Each row gets a `label` that
is unique within the report, the key a chart draws one bar per row on: the node's name, or its
op type and graph index ("Div #9") when it has none, with the graph index added to a name
another node shares and the tensor added when one node produced several compared tensors.
`short_label` is the same label cut in the middle for axes and table cells; `label` keeps it whole.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import onnx

from optistudio.core.data.source import CalibrationSource
from optistudio.core.numerics.sensitivity import LayerError, layer_errors

SHORT_LABEL_CHARS = 32
"""Longest label shown on an axis or in a table cell; longer ones lose their middle."""


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
    """Rows of `errors` (order kept) with each node's index, label and producers in `graph`."""
    labels = node_labels(graph)
    producer = {name: index for index, node in enumerate(graph.node) for name in node.output}
    per_node = Counter(producer.get(error.tensor) for error in errors)
    rows = []
    for rank, error in enumerate(errors, start=1):
        index = producer.get(error.tensor)
        label = labels[index] if index is not None else error.node or error.tensor
        if index is not None and per_node[index] > 1:
            label = f"{label} ({error.tensor})"
        rows.append(_row(rank, error, graph, index, label, labels, producer))
    return rows


def _row(
    rank: int,
    error: LayerError,
    graph: onnx.GraphProto,
    index: int | None,
    label: str,
    labels: list[str],
    producer: dict[str, int],
) -> dict[str, Any]:
    node = graph.node[index] if index is not None else None
    feeding = [producer[name] for name in (node.input if node else []) if name in producer]
    return {
        "rank": rank,
        "label": label,
        "short_label": shorten(label),
        "node": node.name if node else error.node,
        "op_type": node.op_type if node else error.op_type,
        "graph_index": index,
        "fed_by": [labels[number] for number in dict.fromkeys(feeding)],
        "tensor": error.tensor,
        "quantized_node": error.quantized_node,
        "sqnr_db": error.sqnr_db,
        "cosine": error.cosine,
        "noise_added": error.noise_added,
        "noise_to_signal": error.noise_to_signal,
        "samples": error.samples,
    }


def node_labels(graph: onnx.GraphProto) -> list[str]:
    """A readable label per node, unique in the graph: its name, else 'OpType #index'; a name
    several nodes share gets ' #index' too."""
    shared = Counter(node.name for node in graph.node if node.name)
    return [
        (f"{node.name} #{index}" if shared[node.name] > 1 else node.name)
        if node.name
        else f"{node.op_type} #{index}"
        for index, node in enumerate(graph.node)
    ]


def shorten(label: str, limit: int = SHORT_LABEL_CHARS) -> str:
    """`label` cut in the middle to at most `limit` characters; its ends (the scope and the
    op or index) say most about where a node is."""
    if len(label) <= limit:
        return label
    tail = (limit - 1) // 2
    return f"{label[: limit - 1 - tail]}…{label[-tail:]}"
