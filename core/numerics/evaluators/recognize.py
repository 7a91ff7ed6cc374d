"""Which task a model serves, read from its graph: each output's shape and the node that made it.

`model_facts` reads the graph once (no weights: external data is not loaded) and `read_task`
asks every registered evaluator for its case (`Evaluator.weigh`: the outputs it would judge and
the evidence for and against, e.g. boxes: NMS rows, raw YOLOv5 / YOLOv8 predictions such as
[N, 84, 8400], PicoDet heads, see `box_recognition`), adds what the model's input kind says
(`input_kinds`) and decides by the rules of `evidence`:

- only cases that decide compete (the graph must speak for the task: metadata alone never
  decides); the highest total wins, a tie going to the lower `priority` (specific tasks first:
  a probability map before boxes, boxes before text, text before plain classification);
- when the runner-up judges one of the winner's outputs and trails by less than
  CONFLICT_MARGIN, the evidence conflicts and no task is recognized;
- the recognition states its confidence and its reasons (each item weighed, heaviest first).

When no task is recognized the caller judges the model by output cosine (and top-1), and the
reading says why. Recognition reads declared shapes; how the arrays are read is decided again
from each run's real shapes.

`model_facts` also names the outputs no input reaches (`ModelFacts.constant_outputs`): computed
from weights and constants alone, they are the same for every input, and a model all of whose
outputs are so makes every accuracy check void (the card warns, `constant_warning`).

The producer of an output is looked up past pass-through ops (Identity, Reshape, Flatten,
Squeeze, Unsqueeze, Cast, Transpose), which change a tensor's layout or type but not what it
means: a Softmax's probabilities stay probabilities when squeezed. A softmax written in
primitive ops (Exp / ReduceSum / Div, maybe after a ReduceMax / Sub) is read as the Softmax it
is (`softmax_chain`), its chain kept in `OutputFacts.written_as`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
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
from optistudio.core.numerics.evaluators.evidence import (
    Evidence,
    confidence,
    decides,
    lines,
    total,
    why_undecided,
)
from optistudio.core.numerics.evaluators.input_kinds import input_evidence
from optistudio.core.numerics.evaluators.outputs import output_named
from optistudio.core.numerics.evaluators.rescaled import PASS_THROUGH, rescaled_outputs
from optistudio.core.numerics.evaluators.softmax_chain import int_constants, softmax_chain

SOFTMAX_OPS = frozenset({"Softmax", "LogSoftmax", "Hardmax"})
SOFTMAX_LAST_AXIS_SINCE = 13
"""Softmax's axis defaults to -1 from opset 13, to 1 before it."""
RANDOM_OPS = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial"}
)
"""Ops whose outputs change from run to run without an input."""
CONFLICT_MARGIN = 1.0
"""A runner-up on the same outputs this close to the winner's total is a conflict."""


@dataclass(frozen=True)
class Weighed:
    """One task's case with every item weighed, the input kind's included."""

    info: EvaluatorInfo
    recognition: Recognition
    evidence: list[Evidence]

    @property
    def total(self) -> float:
        return total(self.evidence)


@dataclass(frozen=True)
class TaskReading:
    """What recognition made of a model: the task and its judge's view, or None and why."""

    found: tuple[EvaluatorInfo, Recognition] | None
    reasons: list[str] = field(default_factory=list)
    """The recognition's reasons; without a task, why none was recognized, first line first."""

    @property
    def why_none(self) -> str:
        """The first reason when no task was recognized; '' when one was."""
        return self.reasons[0] if self.found is None and self.reasons else ""


def model_facts(path: Path) -> ModelFacts:
    """What recognition reads from the model at `path`: each output's dtype, declared shape
    and producer (with its axis and its own producers), the inputs' shapes, the metadata."""
    model = onnx.load(str(path), load_external_data=False)
    graph = model.graph
    producers = {name: node for node in graph.node for name in node.output}
    opset = _default_opset(model)
    weights = {init.name for init in graph.initializer}
    inputs = [value for value in graph.input if value.name not in weights]
    constants = int_constants(graph)
    rescaled = rescaled_outputs(graph)
    outputs = [_output_facts(value, producers, opset, constants) for value in graph.output]
    return ModelFacts(
        outputs=[
            output.model_copy(update={"scaled_from": rescaled.get(output.name, "")})
            for output in outputs
        ],
        input_shapes={value.name: _dims(value) for value in inputs},
        input_dtypes={value.name: _dtype(value) for value in inputs},
        metadata_keys=sorted({prop.key for prop in model.metadata_props}),
        metadata={prop.key: prop.value for prop in model.metadata_props},
        constant_outputs=_unreached(graph, {value.name for value in inputs}),
    )


def _unreached(graph: onnx.GraphProto, inputs: set[str]) -> list[str]:
    """The graph's outputs that no input reaches (nodes in the order ONNX requires: each after
    its producers). A node with a subgraph (If, Loop, Scan) or a random op counts as reached,
    since it may read the inputs from its body or vary on its own; with no input at all there
    is nothing to reach, and intake says so already."""
    if not inputs:
        return []
    reached = set(inputs)
    for node in graph.node:
        varies = node.op_type in RANDOM_OPS or any(
            attribute.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
            for attribute in node.attribute
        )
        if varies or reached.intersection(node.input):
            reached.update(node.output)
    return [value.name for value in graph.output if value.name not in reached]


def constant_warning(facts: ModelFacts) -> str:
    """The card's warning when no input reaches any of the model's outputs; '' otherwise."""
    outputs = [output.name for output in facts.outputs]
    if not outputs or set(facts.constant_outputs) < set(outputs):
        return ""
    return (
        f"No input reaches the model's outputs ({', '.join(outputs)}): they are computed from "
        "weights and constants alone and are the same for every input, so every accuracy "
        "check compares constants and says nothing. Check the export."
    )


def recognize_task(
    facts: ModelFacts, task: str | None = None, outputs: list[str] | None = None
) -> tuple[EvaluatorInfo, Recognition] | None:
    """The task judging this model, and why (`read_task`); None when none is recognized.

    Raises UnknownName for an unregistered task and InvalidSpec for an output the model lacks
    or one the set task cannot judge."""
    return read_task(facts, task, outputs).found


def read_task(
    facts: ModelFacts, task: str | None = None, outputs: list[str] | None = None
) -> TaskReading:
    """`task` when the user set it (judging `outputs`, else the ones it would pick), else the
    task the evidence decides on (module docstring; only `outputs` looked at when given), with
    its confidence and reasons; or no task, and why.

    Raises UnknownName for an unregistered task and InvalidSpec for an output the model lacks
    or one the set task cannot judge."""
    for name in outputs or []:
        output_named(facts, name)
    if task is not None:
        info = evaluators.get(task)
        chosen = info.create().for_outputs(facts, outputs)
        return TaskReading((info, chosen), list(chosen.reasons))
    return decide(weigh_cases(_only(facts, outputs) if outputs else facts))


def weigh_cases(facts: ModelFacts) -> list[Weighed]:
    """Every registered task's case in the model, with what its input kind says for it."""
    cases = []
    for info in sorted(evaluators, key=lambda entry: (entry.priority, entry.name)):
        case = info.create().weigh(facts)
        if case is not None:
            evidence = [*case.evidence, *input_evidence(facts, info.input_kinds)]
            cases.append(Weighed(info, case.recognition, evidence))
    return cases


def decide(cases: list[Weighed]) -> TaskReading:
    """The task the cases decide on, with its confidence and reasons, or none and why."""
    deciding = sorted(
        (case for case in cases if decides(case.evidence)),
        key=lambda case: (-case.total, case.info.priority, case.info.name),
    )
    if not deciding:
        return TaskReading(None, _undecided(cases))
    best, rivals = deciding[0], deciding[1:]
    rival = next(
        (r for r in rivals if set(r.recognition.outputs) & set(best.recognition.outputs)), None
    )
    if rival is not None and best.total - rival.total < CONFLICT_MARGIN:
        return TaskReading(None, _conflict(best, rival))
    reasons = lines(best.evidence) + [
        f"ahead of {case.info.name} ({case.total:g} against {best.total:g})" for case in rivals
    ]
    recognition = best.recognition.model_copy(
        update={"confidence": confidence(best.evidence), "reasons": reasons}
    )
    return TaskReading((best.info, recognition), reasons)


def _undecided(cases: list[Weighed]) -> list[str]:
    if not cases:
        return ["no task recognized: no output is shaped or made like any task's"]
    weighed = [
        f"not {case.info.name}: {why_undecided(case.evidence)} ({'; '.join(lines(case.evidence))})"
        for case in cases
    ]
    return ["no task recognized: the evidence for each task is too weak", *weighed]


def _conflict(best: Weighed, rival: Weighed) -> list[str]:
    shared = sorted(set(best.recognition.outputs) & set(rival.recognition.outputs))
    return [
        f"no task recognized: the evidence conflicts, {', '.join(shared)} reads as "
        f"{best.info.name} ({best.total:g}) and as {rival.info.name} ({rival.total:g})",
        *(f"{best.info.name}: {line}" for line in lines(best.evidence)),
        *(f"{rival.info.name}: {line}" for line in lines(rival.evidence)),
    ]


def _only(facts: ModelFacts, outputs: list[str]) -> ModelFacts:
    return facts.model_copy(
        update={"outputs": [output for output in facts.outputs if output.name in outputs]}
    )


def _output_facts(
    value: onnx.ValueInfoProto,
    producers: dict[str, onnx.NodeProto],
    opset: int,
    constants: Mapping[str, list[int]],
) -> OutputFacts:
    def producer(name: str) -> onnx.NodeProto | None:
        return _past_pass_through(producers.get(name), producers)

    node = producer(value.name)
    declared = OutputFacts(
        name=value.name, dtype=_dtype(value), shape=_dims(value), scalar=_scalar(value)
    )
    if node is None:
        return declared
    chain = softmax_chain(node, producer, constants)
    if chain is not None:  # a softmax written in primitive ops is still a softmax
        source = [chain.source.op_type] if chain.source is not None else []
        made = {"producer": "Softmax", "producer_axis": chain.axis, "feeds": source}
        return declared.model_copy(update=made | {"written_as": chain.written_as})
    feeds = [producer(name) for name in node.input]
    made = {"producer": node.op_type, "producer_axis": _axis(node, opset)}
    return declared.model_copy(
        update=made | {"feeds": [feed.op_type for feed in feeds if feed is not None]}
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


def _scalar(value: onnx.ValueInfoProto) -> bool:
    """Declared with rank 0 (a shape with no dims), as against no shape at all."""
    tensor = value.type.tensor_type
    return value.type.HasField("tensor_type") and tensor.HasField("shape") and not tensor.shape.dim


def as_run(facts: ModelFacts, shapes: Mapping[str, list[int]]) -> ModelFacts | None:
    """The facts read at the shapes a run had (`shapes`, by input and output name) where the
    declaration leaves them open or is contradicted: an output of another rank (ddddocr's
    [1, seqlen] for [T, 1, C]) takes the run's shape, an open dim (a name, unknown) of an
    output or an input the run's size (PP-OCRv6's map, declared with no dim fixed, is
    [N, 1, H, W]; a PicoDet's heads count cells of the image fed). None when nothing changes."""
    outputs = [_as_ran(output, shapes.get(output.name)) for output in facts.outputs]
    inputs = {
        name: _open_dims_filled(shape, shapes.get(name))
        for name, shape in facts.input_shapes.items()
    }
    if outputs == facts.outputs and inputs == facts.input_shapes:
        return None
    return facts.model_copy(update={"outputs": outputs, "input_shapes": inputs})


def _open_dims_filled(declared: list[Dim], ran: list[int] | None) -> list[Dim]:
    if ran is None or len(ran) != len(declared):
        return declared
    return [dim if isinstance(dim, int) else seen for dim, seen in zip(declared, ran, strict=True)]


def _as_ran(output: OutputFacts, ran: list[int] | None) -> OutputFacts:
    if ran is None:
        return output
    if not ran and not output.scalar:  # ran with rank 0: one value
        return output.model_copy(update={"shape": [], "scalar": True})
    if len(ran) != len(output.shape):
        return output.model_copy(update={"shape": list(ran)})
    shape = _open_dims_filled(output.shape, ran)
    return output.model_copy(update={"shape": shape}) if shape != output.shape else output
