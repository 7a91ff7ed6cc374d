"""Keep a rewritten graph valid for its IR version: before IR 4 every initializer is an input.

ONNX IR versions below 4 (files from ONNX 1.2 and older) require each initializer to be listed
among the graph's inputs as well; from IR 4 on an initializer may stand alone. A rewrite that
adds a constant to an old file (a Reshape target with its batch freed) must list it too, or
`onnx.checker.check_model(full_check=True)` refuses the file ("X in initializer but not in
graph input") although ONNX Runtime loads it. `list_initializers` adds the missing entries,
with each initializer's type and shape, to the main graph and to every subgraph.
"""

from __future__ import annotations

import onnx
from onnx import helper

FIRST_IR_WITHOUT_LISTING = 4
"""From this IR version on, initializers need not be graph inputs."""


def list_initializers(model: onnx.ModelProto) -> list[str]:
    """For IR < 4, list every initializer that is not a graph input as one (in place); returns
    the names added ([] for IR >= 4, where nothing is needed)."""
    if model.ir_version >= FIRST_IR_WITHOUT_LISTING:
        return []
    return _list_in(model.graph)


def _list_in(graph: onnx.GraphProto) -> list[str]:
    listed = {value.name for value in graph.input}
    added = []
    for tensor in graph.initializer:
        if tensor.name not in listed:
            graph.input.append(
                helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims))
            )
            listed.add(tensor.name)
            added.append(tensor.name)
    for node in graph.node:
        for attribute in node.attribute:
            for sub in (*attribute.graphs, *([attribute.g] if attribute.HasField("g") else [])):
                added += _list_in(sub)
    return added
