"""Operators a model calls in ONNX's own domains that ONNX does not define at the model's opset.

ONNX Runtime registers a few of its own operators in the default domain, and its graph optimizer
writes them there: SimplifiedLayerNormalization (RMSNorm), LayerNormalization below opset 17.
onnx.checker refuses such a node ("No Op registered for ..."), although ONNX Runtime runs it, while
it passes nodes of other domains (com.microsoft) unchecked. Either way the checker cannot judge
them: a runtime loading the model does (intake's load check, the pass that wrote them).
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx

ONNX_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "ai.onnx.training", "ai.onnx.preview.training")
"""The domains the checker holds to ONNX's own operator schemas."""


def undefined_ops(model: onnx.ModelProto) -> list[str]:
    """Op types in ONNX's domains (subgraphs included) with no ONNX schema at the model's opset
    and no function of the model's own; sorted, each once."""
    opsets = {_canonical(entry.domain): entry.version for entry in model.opset_import}
    local = {(_canonical(f.domain), f.name) for f in model.functions}
    undefined = {
        node.op_type
        for node in _nodes(model.graph)
        if (domain := _canonical(node.domain)) in ONNX_DOMAINS
        and (domain, node.op_type) not in local
        and not onnx.defs.has(node.op_type, opsets.get(domain, 1), domain)
    }
    return sorted(undefined)


def _canonical(domain: str) -> str:
    return "" if domain == "ai.onnx" else domain


def _nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of `graph` and of the subgraphs in its attributes (If, Loop, Scan bodies)."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            if attribute.HasField("g"):
                yield from _nodes(attribute.g)
            for subgraph in attribute.graphs:
                yield from _nodes(subgraph)
