"""Which task a model serves, read from its graph: each output's shape and the node that made it.

`model_facts` reads the graph once (no weights: external data is not loaded) and
`recognize_task` asks the registered evaluators in `priority` order (specific tasks first: a
probability map before boxes, boxes before text, text before plain classification) whether the
outputs look like theirs; the first that answers wins, with its reason. When none does, the
caller judges the model by output cosine alone.

The producer of an output is looked up past pass-through ops (Identity, Reshape, Flatten,
Squeeze, Unsqueeze, Cast, Transpose), which change a tensor's layout or type but not what it
means: a Softmax's probabilities stay probabilities when squeezed.
"""

from __future__ import annotations

from pathlib import Path

import onnx

from optistudio.core.model.info import Dim, is_anonymous
from optistudio.core.numerics.evaluators.base import (
    EvaluatorInfo,
    ModelFacts,
    OutputFacts,
    Recognition,
    evaluators,
)
from optistudio.core.numerics.evaluators.outputs import output_named

PASS_THROUGH = frozenset(
    {"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Cast", "Transpose"}
)
SOFTMAX_OPS = frozenset({"Softmax", "LogSoftmax", "Hardmax"})
SOFTMAX_LAST_AXIS_SINCE = 13
"""Softmax's axis defaults to -1 from opset 13, to 1 before it."""


def model_facts(path: Path) -> ModelFacts:
    """What recognition reads from the model at `path`: each output's dtype, declared shape
    and producer (with its axis and its own producers), the inputs' shapes, the metadata."""
    model = onnx.load(str(path), load_external_data=False)
    graph = model.graph
    producers = {name: node for node in graph.node for name in node.output}
    opset = _default_opset(model)
    weights = {init.name for init in graph.initializer}
    return ModelFacts(
        outputs=[_output_facts(value, producers, opset) for value in graph.output],
        input_shapes={
            value.name: _dims(value) for value in graph.input if value.name not in weights
        },
        metadata_keys=sorted({prop.key for prop in model.metadata_props}),
        metadata={prop.key: prop.value for prop in model.metadata_props},
    )


def recognize_task(
    facts: ModelFacts, task: str | None = None, outputs: list[str] | None = None
) -> tuple[EvaluatorInfo, Recognition] | None:
    """The task judging this model, and why: `task` when the user set it (judging `outputs`,
    else the ones it would pick), else the first registered evaluator, in priority order,
    that recognizes the outputs (only `outputs` when given). None when none does.

    Raises UnknownName for an unregistered task and InvalidSpec for an output the model lacks
    or one the set task cannot judge."""
    for name in outputs or []:
        output_named(facts, name)
    if task is not None:
        info = evaluators.get(task)
        return info, info.create().for_outputs(facts, outputs)
    looked_at = _only(facts, outputs) if outputs else facts
    for info in sorted(evaluators, key=lambda entry: (entry.priority, entry.name)):
        found = info.create().recognize(looked_at)
        if found is not None:
            return info, found
    return None


def _only(facts: ModelFacts, outputs: list[str]) -> ModelFacts:
    return facts.model_copy(
        update={"outputs": [output for output in facts.outputs if output.name in outputs]}
    )


def _output_facts(
    value: onnx.ValueInfoProto, producers: dict[str, onnx.NodeProto], opset: int
) -> OutputFacts:
    node = _past_pass_through(producers.get(value.name), producers)
    if node is None:
        return OutputFacts(name=value.name, dtype=_dtype(value), shape=_dims(value))
    feeds = [_past_pass_through(producers.get(name), producers) for name in node.input]
    return OutputFacts(
        name=value.name,
        dtype=_dtype(value),
        shape=_dims(value),
        producer=node.op_type,
        producer_axis=_axis(node, opset),
        feeds=[feed.op_type for feed in feeds if feed is not None],
    )


def _past_pass_through(
    node: onnx.NodeProto | None, producers: dict[str, onnx.NodeProto]
) -> onnx.NodeProto | None:
    seen = 0
    while node is not None and node.op_type in PASS_THROUGH and node.input and seen < 64:
        node = producers.get(node.input[0])
        seen += 1
    return node


def _axis(node: onnx.NodeProto, opset: int) -> int | None:
    """The node's axis attribute; for a Softmax without one, the default of its opset."""
    for attribute in node.attribute:
        if attribute.name == "axis" and attribute.type == onnx.AttributeProto.INT:
            return int(attribute.i)
    if node.op_type in SOFTMAX_OPS and node.domain in ("", "ai.onnx"):
        return -1 if opset >= SOFTMAX_LAST_AXIS_SINCE else 1
    return None


def _default_opset(model: onnx.ModelProto) -> int:
    versions = [entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")]
    return max(versions, default=SOFTMAX_LAST_AXIS_SINCE)


def _dtype(value: onnx.ValueInfoProto) -> str:
    """A tensor's numpy dtype name; 'sequence', 'map'... for other kinds (as intake writes)."""
    kind = value.type.WhichOneof("value")
    if kind not in ("tensor_type", "sparse_tensor_type"):
        return (kind or "undefined").removesuffix("_type")
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(getattr(value.type, kind).elem_type).name
    except KeyError:
        return "undefined"


def _dims(value: onnx.ValueInfoProto) -> list[Dim]:
    """Declared dims: a size, a symbolic name, or None (unnamed: -1, '?', ''); [] if unknown."""
    kind = value.type.WhichOneof("value")
    if kind not in ("tensor_type", "sparse_tensor_type"):
        return []
    dims: list[Dim] = []
    for dim in getattr(value.type, kind).shape.dim:
        declared: Dim = dim.dim_value if dim.dim_value > 0 else (dim.dim_param or None)
        dims.append(None if is_anonymous(declared) else declared)
    return dims
