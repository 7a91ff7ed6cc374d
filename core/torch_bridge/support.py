"""What the bridge supports, and the errors it raises; importable without torch."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable

import onnx

from optistudio.core.errors import BackendUnavailable, PassFailed

TORCH_EXTRA_HINT = "Install the extra: pip install 'optistudio[qat]' (torch 2.13, CPU wheel)."

SUPPORTED_OPS: frozenset[str] = frozenset(
    {
        # convolutions, dense layers, normalization
        "Conv", "ConvTranspose", "Gemm", "MatMul", "BatchNormalization",
        # activations
        "Relu", "LeakyRelu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Erf",
        "Softmax", "LogSoftmax", "Elu", "Selu", "Softplus", "Gelu", "PRelu",
        # elementwise arithmetic
        "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Exp", "Log", "Neg", "Abs", "Reciprocal",
        "Max", "Min", "Sum",
        # pooling and reductions
        "GlobalAveragePool", "GlobalMaxPool", "AveragePool", "MaxPool",
        "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin",
        # layout
        "Flatten", "Reshape", "Transpose", "Concat", "Split", "Squeeze", "Unsqueeze", "Pad",
        "Slice", "Gather", "Shape", "Cast", "Expand", "ConstantOfShape",
        # comparisons and selection (masks)
        "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or",
        "Where",
        # no-ops at inference
        "Identity", "Dropout", "Constant",
    }
)  # fmt: skip


class UnsupportedOps(PassFailed):
    """The graph uses ops the ONNX-to-PyTorch bridge cannot build."""

    def __init__(self, ops: Iterable[str]) -> None:
        self.ops = sorted(set(ops))
        super().__init__(
            f"The model uses ops the PyTorch bridge does not support: {', '.join(self.ops)}; "
            "quantization-aware training needs every op supported, so use a post-training "
            "INT8 recipe (int8_static, int8_mixed) for this model instead.",
            hint=f"Supported ops: {', '.join(sorted(SUPPORTED_OPS))}.",
        )


def supported_ops() -> frozenset[str]:
    """ONNX op types (default domain) the bridge builds."""
    return SUPPORTED_OPS


def unsupported_ops(model: onnx.ModelProto) -> list[str]:
    """The model's op types outside `supported_ops()`, sorted; custom domains count as
    unsupported under 'domain::Op'."""
    found = set()
    for node in _all_nodes(model.graph):
        if node.domain not in ("", "ai.onnx"):
            found.add(f"{node.domain}::{node.op_type}")
        elif node.op_type not in SUPPORTED_OPS:
            found.add(node.op_type)
    return sorted(found)


def _all_nodes(graph: onnx.GraphProto) -> Iterable[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(attr.g)


def torch_available() -> bool:
    """Whether torch can be imported here (without importing it)."""
    return importlib.util.find_spec("torch") is not None


def require_torch(what: str) -> None:
    """BackendUnavailable naming the extra when torch is missing."""
    if not torch_available():
        raise BackendUnavailable(
            f"{what} needs PyTorch, which is not installed.", hint=TORCH_EXTRA_HINT
        )
