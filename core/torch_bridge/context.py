"""What an op builder sees: the node's attributes, the graph's constant tensors, the opset."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from optistudio.core.errors import PassFailed


@dataclass
class BuildContext:
    """Constant tensors (initializers and Constant outputs) by name, and the default opset."""

    opset: int
    constants: dict[str, np.ndarray] = field(default_factory=dict)

    def constant(self, name: str) -> np.ndarray | None:
        """The value of tensor `name` when the graph fixes it, else None."""
        return self.constants.get(name) if name else None

    def static_ints(self, node: onnx.NodeProto, index: int) -> list[int] | None:
        """Input `index` as a list of ints when it is a constant (None when absent or computed)."""
        if index >= len(node.input) or not node.input[index]:
            return None
        value = self.constant(node.input[index])
        return None if value is None else [int(v) for v in value.reshape(-1)]

    def weight(self, node: onnx.NodeProto, index: int) -> np.ndarray:
        """Input `index`, which must be a constant (a weight), as float32."""
        value = self.constant(node.input[index])
        if value is None:
            raise PassFailed(
                f"{node.op_type} node {node.name or node.output[0]!r} computes its weights "
                "in the graph; the PyTorch bridge needs them stored as initializers.",
                hint="Fold constants first (onnxslim or the 'simplify' pass).",
            )
        return value.astype(np.float32)


def attrs(node: onnx.NodeProto) -> dict[str, Any]:
    """The node's attributes as Python values."""
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def constant_value(node: onnx.NodeProto) -> np.ndarray:
    """The tensor a Constant node produces."""
    found = attrs(node)
    if "value" in found:
        return numpy_helper.to_array(found["value"])
    for key, dtype in (
        ("value_float", np.float32),
        ("value_floats", np.float32),
        ("value_int", np.int64),
        ("value_ints", np.int64),
    ):
        if key in found:
            return np.array(found[key], dtype=dtype)
    raise PassFailed(
        f"Constant node {node.name or node.output[0]!r} holds a {sorted(found)} value, which the "
        "PyTorch bridge does not read.",
        hint="Fold constants first (onnxslim or the 'simplify' pass).",
    )
