"""Whether dynamic batching applies to a model: every input and output needs a dynamic dim 0."""

from __future__ import annotations

from optistudio.core.errors import InvalidSpec
from optistudio.core.model.info import ModelInfo, TensorSpec


def batch_dim_problem(info: ModelInfo) -> str | None:
    """Why requests cannot be stacked along dim 0 of this model, or None when they can."""
    for kind, specs in (("input", info.inputs), ("output", info.outputs)):
        for spec in specs:
            reason = _tensor_problem(kind, spec)
            if reason:
                return reason
    if not info.inputs:
        return "The model has no inputs."
    return None


def require_batch_dim(info: ModelInfo) -> None:
    """Raise InvalidSpec saying why batching does not apply, when it does not."""
    problem = batch_dim_problem(info)
    if problem:
        raise InvalidSpec(
            f"Dynamic batching does not apply to this model: {problem}",
            hint="Export the model with a dynamic first (batch) dimension on every input and "
            "output, e.g. torch.onnx.export(..., dynamic_axes={'input': {0: 'batch'}}).",
        )


NON_TENSOR_DTYPES = ("sequence", "map", "optional", "opaque", "undefined")
"""What intake calls a value that is not a tensor (optistudio.core.model.intake)."""


def _tensor_problem(kind: str, spec: TensorSpec) -> str | None:
    if spec.dtype in NON_TENSOR_DTYPES:
        return (
            f"{kind} {spec.name!r} is a {spec.dtype}, not a tensor, so it cannot be split "
            "into one answer per request (skl2onnx writes a tensor with "
            "options={'zipmap': False})."
        )
    if not spec.shape:
        return f"{kind} {spec.name!r} is a scalar, so it has no batch dimension to stack along."
    first = spec.shape[0]
    if isinstance(first, int) and first > 0:
        return (
            f"{kind} {spec.name!r} has a fixed first dimension of {first}, so requests cannot "
            "be stacked into one larger batch."
        )
    return None
