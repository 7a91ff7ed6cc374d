"""The model's text that its card and the studio read, checked to be text.

ONNX stores names as protobuf strings, but a proto2 parser keeps a string that is not valid
UTF-8 as bytes: a one-byte flip in a dim name ('b\\x9etch') passes the checker and ONNX Runtime's
load, then breaks the model card (a validation error, not a sentence). Checked here from the
parsed protobuf: the producer, domains, graph name, metadata, opset domains, the graph's inputs
and outputs (names, dim names, denotations) and its nodes (op types, domains, names, values).
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx

from optistudio.core.errors import ModelRejected


def check_text_fields(model: onnx.ModelProto) -> None:
    """ModelRejected naming where the first field that is not valid UTF-8 sits."""
    for where, value in _text_fields(model):
        if isinstance(value, bytes):
            raise ModelRejected(
                f"The model holds text that is not valid UTF-8 ({where}).",
                hint="The file is probably corrupted; export or upload it again.",
            )


def _text_fields(model: onnx.ModelProto) -> Iterator[tuple[str, object]]:
    graph = model.graph
    yield "the producer name", model.producer_name
    yield "the producer version", model.producer_version
    yield "the model's domain", model.domain
    yield "the graph's name", graph.name
    for prop in model.metadata_props:
        yield "a metadata key", prop.key
        yield f"metadata {prop.key!r}", prop.value
    for opset in model.opset_import:
        yield "an opset domain", opset.domain
    for value in (*graph.input, *graph.output):
        yield from _value_fields(value)
    for node in graph.node:
        yield "an operator type", node.op_type
        yield "an operator domain", node.domain
        yield "a node name", node.name
        for name in (*node.input, *node.output):
            yield "a node's input or output name", name


def _value_fields(value: onnx.ValueInfoProto) -> Iterator[tuple[str, object]]:
    yield "an input or output name", value.name
    kind = value.type.WhichOneof("value")
    if kind not in ("tensor_type", "sparse_tensor_type"):
        return
    for dim in getattr(value.type, kind).shape.dim:
        yield f"a dim name of {value.name!r}", dim.dim_param
        yield f"a dim denotation of {value.name!r}", dim.denotation
