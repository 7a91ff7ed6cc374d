"""A squashing op mapped onto a range by constants: y = a * s(x) + b, a bounded score.

Speech-quality regressors end this way: PLCMOS and AECMOS compute 1 + 4 * sigmoid(x) (a mean
opinion score of 1-5) as Sigmoid -> Mul by a constant -> Add a constant. The output's producer
is then an Add, and nothing marks it as a score. Walking back from an output past pass-through
ops and past Mul, Add, Sub and Div nodes one of whose inputs is a constant (an initializer or a
Constant node) reaches the op that made the values; when that is a Sigmoid, HardSigmoid or
Tanh and at least one such step was taken, the output is that op rescaled. A classifier's
probability is used as it is (or thresholded), never shifted onto another range, so this reads
as a regressor's score.
"""

from __future__ import annotations

import onnx

SQUASHING_OPS = frozenset({"Sigmoid", "HardSigmoid", "Tanh"})
AFFINE_OPS = frozenset({"Mul", "Add", "Sub", "Div"})
PASS_THROUGH = frozenset(
    {"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Cast", "Transpose"}
)
MOST_STEPS = 16


def rescaled_outputs(graph: onnx.GraphProto) -> dict[str, str]:
    """{output name: 'Sigmoid'} for each graph output that is a squashing op rescaled by
    constants (module docstring); outputs that are not are left out."""
    producers = {name: node for node in graph.node for name in node.output}
    constants = _constant_names(graph)
    found = {}
    for value in graph.output:
        squash = _rescaled_from(value.name, producers, constants)
        if squash:
            found[value.name] = squash
    return found


def _rescaled_from(name: str, producers: dict[str, onnx.NodeProto], constants: set[str]) -> str:
    scaled = False
    node = producers.get(name)
    for _ in range(MOST_STEPS):
        if node is None:
            return ""
        if node.op_type in SQUASHING_OPS:
            return node.op_type if scaled else ""
        if node.op_type in PASS_THROUGH and node.input:
            node = producers.get(node.input[0])
            continue
        varying = _varying_input(node, constants)
        if varying is None:
            return ""
        scaled, node = True, producers.get(varying)
    return ""


def _varying_input(node: onnx.NodeProto, constants: set[str]) -> str | None:
    """For an affine op with exactly one constant input, the other input; else None."""
    if node.op_type not in AFFINE_OPS or len(node.input) != 2:
        return None
    fixed = [name in constants for name in node.input]
    if fixed.count(True) != 1:
        return None
    return node.input[fixed.index(False)]


def _constant_names(graph: onnx.GraphProto) -> set[str]:
    names = {init.name for init in graph.initializer}
    names |= {node.output[0] for node in graph.node if node.op_type == "Constant" and node.output}
    return names
