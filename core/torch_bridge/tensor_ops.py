"""Builders of the ops without weights: activations, arithmetic, reductions and layout.

Inputs the graph fixes (Reshape's shape, Squeeze's axes, Pad's pads, Slice's starts...) are
read at build time into Python values, so the module has no data-dependent shapes; when the
graph computes them, they are read from the tensor at run time (eager mode only).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce
from typing import Any

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper
from torch import nn

from optistudio.core.errors import PassFailed
from optistudio.core.torch_bridge.context import BuildContext, attrs

Built = tuple[nn.Module, list[str]]


class Apply(nn.Module):
    """A function of the runtime inputs (with fixed keyword arguments)."""

    def __init__(self, fn: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__()
        self.fn = fn
        self.kwargs = kwargs

    def forward(self, *tensors: Any) -> Any:
        return self.fn(*tensors, **self.kwargs)


def _div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.is_floating_point() or b.is_floating_point():
        return a / b
    return torch.div(a, b, rounding_mode="trunc")


UNARY: dict[str, Callable[..., torch.Tensor]] = {
    "Relu": F.relu,
    "Sigmoid": torch.sigmoid,
    "Tanh": torch.tanh,
    "Erf": torch.erf,
    "HardSwish": F.hardswish,
    "Softplus": F.softplus,
    "Sqrt": torch.sqrt,
    "Exp": torch.exp,
    "Log": torch.log,
    "Neg": torch.neg,
    "Abs": torch.abs,
    "Reciprocal": torch.reciprocal,
    "Identity": lambda x: x,
    "Not": torch.logical_not,
}
BINARY: dict[str, Callable[..., torch.Tensor]] = {
    "Add": torch.add,
    "Sub": torch.sub,
    "Mul": torch.mul,
    "Div": _div,
    "Pow": torch.pow,
    "PRelu": lambda x, slope: torch.where(x >= 0, x, x * slope),
    "Equal": torch.eq,
    "Less": torch.lt,
    "Greater": torch.gt,
    "LessOrEqual": torch.le,
    "GreaterOrEqual": torch.ge,
    "And": torch.logical_and,
    "Or": torch.logical_or,
}
VARIADIC: dict[str, Callable[..., torch.Tensor]] = {
    "Max": torch.maximum,
    "Min": torch.minimum,
    "Sum": torch.add,
}


def _all_inputs(node: onnx.NodeProto) -> list[str]:
    return list(node.input)


def unary(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    return Apply(UNARY[node.op_type]), [node.input[0]]


def binary(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    return Apply(BINARY[node.op_type]), _all_inputs(node)


def variadic(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    fn = VARIADIC[node.op_type]
    return Apply(lambda *xs: reduce(fn, xs)), _all_inputs(node)


def activation(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    found = attrs(node)
    op = node.op_type
    if op == "LeakyRelu":
        return Apply(F.leaky_relu, negative_slope=float(found.get("alpha", 0.01))), [node.input[0]]
    if op == "Elu":
        return Apply(F.elu, alpha=float(found.get("alpha", 1.0))), [node.input[0]]
    if op == "Selu":
        alpha, gamma = float(found.get("alpha", 1.67326319)), float(found.get("gamma", 1.05070102))
        return Apply(lambda x: gamma * torch.where(x > 0, x, alpha * torch.expm1(x))), [
            node.input[0]
        ]
    if op == "Gelu":
        approx = found.get("approximate", b"none")
        approx = approx.decode() if isinstance(approx, bytes) else approx
        return Apply(F.gelu, approximate=approx), [node.input[0]]
    alpha, beta = float(found.get("alpha", 0.2)), float(found.get("beta", 0.5))  # HardSigmoid
    return Apply(lambda x: torch.clamp(alpha * x + beta, 0.0, 1.0)), [node.input[0]]


def clip(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    found = attrs(node)
    if ctx.opset < 11:
        low, high = found.get("min"), found.get("max")
        return Apply(lambda x: torch.clamp(x, low, high)), [node.input[0]]
    bounds: list[Any] = []
    for index in (1, 2):
        name = node.input[index] if len(node.input) > index else ""
        value = ctx.constant(name)
        bounds.append(None if not name else (float(value) if value is not None else name))
    if all(not isinstance(b, str) for b in bounds):
        low, high = bounds
        return Apply(lambda x: torch.clamp(x, low, high)), [node.input[0]]
    return Apply(lambda x, lo=None, hi=None: torch.clamp(x, lo, hi)), _all_inputs(node)


def softmax(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    axis = int(attrs(node).get("axis", -1 if ctx.opset >= 13 else 1))
    fn = F.softmax if node.op_type == "Softmax" else F.log_softmax
    if ctx.opset >= 13:
        return Apply(lambda x: fn(x, dim=axis)), [node.input[0]]

    def coerced(x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(int(np.prod(x.shape[:axis])), -1)
        return fn(flat, dim=1).reshape(x.shape)

    return Apply(coerced), [node.input[0]]


def flatten(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    axis = int(attrs(node).get("axis", 1))

    def run(x: torch.Tensor) -> torch.Tensor:
        cut = axis % x.dim() if axis < 0 else axis
        outer = 1
        for size in x.shape[:cut]:
            outer *= size
        return x.reshape(outer, -1)

    return Apply(run), [node.input[0]]


def _reshape(x: torch.Tensor, shape: list[int], allowzero: bool) -> torch.Tensor:
    target = [x.shape[i] if s == 0 and not allowzero else s for i, s in enumerate(shape)]
    return x.reshape(target)


def reshape(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    allowzero = bool(attrs(node).get("allowzero", 0))
    shape = ctx.static_ints(node, 1)
    if shape is not None:
        return Apply(lambda x: _reshape(x, shape, allowzero)), [node.input[0]]
    return Apply(lambda x, s: _reshape(x, s.tolist(), allowzero)), _all_inputs(node)


def transpose(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    perm = attrs(node).get("perm")
    if perm is None:
        return Apply(lambda x: x.permute(*reversed(range(x.dim())))), [node.input[0]]
    return Apply(lambda x: x.permute(*perm)), [node.input[0]]


def concat(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    axis = int(attrs(node)["axis"])
    return Apply(lambda *xs: torch.cat(xs, dim=axis)), _all_inputs(node)


def split(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    found = attrs(node)
    axis, count = int(found.get("axis", 0)), len(node.output)
    sizes = found.get("split") if ctx.opset < 13 else ctx.static_ints(node, 1)

    def run(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if sizes:
            return tuple(torch.split(x, list(sizes), dim=axis))
        step = -(-x.shape[axis] // count)
        return tuple(torch.split(x, step, dim=axis))

    return Apply(run), [node.input[0]]


def _axes(node: onnx.NodeProto, ctx: BuildContext, input_from: int) -> list[int] | None:
    """Axes from the attribute (older opsets) or input 1 (opset >= input_from)."""
    if ctx.opset >= input_from:
        if len(node.input) > 1 and node.input[1] and ctx.constant(node.input[1]) is None:
            raise PassFailed(
                f"{node.op_type} node {node.name!r} computes its axes in the graph; the "
                "PyTorch bridge needs them constant.",
                hint="Fold constants first (onnxslim or the 'simplify' pass).",
            )
        return ctx.static_ints(node, 1)
    found = attrs(node).get("axes")
    return None if found is None else [int(a) for a in found]


def squeeze(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    axes = _axes(node, ctx, 13)
    if axes is None:
        return Apply(torch.squeeze), [node.input[0]]
    return Apply(lambda x: x.squeeze(tuple(a % x.dim() for a in axes))), [node.input[0]]


def unsqueeze(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    axes = _axes(node, ctx, 13) or []

    def run(x: torch.Tensor) -> torch.Tensor:
        rank = x.dim() + len(axes)
        for axis in sorted(a % rank for a in axes):
            x = x.unsqueeze(axis)
        return x

    return Apply(run), [node.input[0]]


_REDUCERS: dict[str, Callable[..., torch.Tensor]] = {
    "ReduceMean": torch.mean,
    "ReduceSum": torch.sum,
    "ReduceMax": torch.amax,
    "ReduceMin": torch.amin,
}


def reduce_op(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    found = attrs(node)
    axes = _axes(node, ctx, 13 if node.op_type == "ReduceSum" else 18)
    keep = bool(found.get("keepdims", 1))
    noop = bool(found.get("noop_with_empty_axes", 0))
    fn = _REDUCERS[node.op_type]

    def run(x: torch.Tensor) -> torch.Tensor:
        if not axes:
            return x if noop else fn(x, dim=tuple(range(x.dim())), keepdim=keep)
        return fn(x, dim=tuple(axes), keepdim=keep)

    return Apply(run), [node.input[0]]


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}


def pad(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    found = attrs(node)
    mode = found.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in _PAD_MODES:
        raise PassFailed(
            f"Pad node {node.name!r} uses mode {mode!r}; the bridge builds constant, reflect and edge."
        )
    pads = found.get("pads") if ctx.opset < 11 else ctx.static_ints(node, 1)
    value = float(found.get("value", 0.0))
    if ctx.opset >= 11 and len(node.input) > 2 and node.input[2]:
        fixed = ctx.constant(node.input[2])
        value = float(fixed) if fixed is not None else value
    if pads is None or (len(node.input) > 3 and node.input[3]):
        raise PassFailed(
            f"Pad node {node.name!r} computes its pads or sets axes; the bridge needs constant pads on every axis."
        )
    rank = len(pads) // 2
    flat: list[int] = []
    for begin, end in zip(reversed(pads[:rank]), reversed(pads[rank:]), strict=True):
        flat += [int(begin), int(end)]
    while len(flat) > 2 and flat[-2:] == [0, 0]:
        flat = flat[:-2]
    kwargs = {"value": value} if mode == "constant" else {}
    return Apply(F.pad, pad=flat, mode=_PAD_MODES[mode], **kwargs), [node.input[0]]


def _slice(x: torch.Tensor, starts: Any, ends: Any, axes: Any, steps: Any) -> torch.Tensor:
    starts, ends = _ints(starts), _ints(ends)
    axes = _ints(axes) if axes is not None else list(range(len(starts)))
    steps = _ints(steps) if steps is not None else [1] * len(starts)
    index = [slice(None)] * x.dim()
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        if step < 1:
            raise PassFailed("Slice with a negative step is not built by the PyTorch bridge.")
        size = x.shape[axis]
        index[axis] = slice(max(min(start, size), -size), max(min(end, size), -size - 1), step)
    return x[tuple(index)]


def _ints(value: Any) -> list[int]:
    return value.tolist() if isinstance(value, torch.Tensor) else list(value)


def slice_op(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    if ctx.opset < 10:
        found = attrs(node)
        fixed = [found["starts"], found["ends"], found.get("axes"), None]
        return Apply(lambda x: _slice(x, *fixed)), [node.input[0]]
    statics = [ctx.static_ints(node, i) for i in range(1, len(node.input))]
    if all(v is not None or not node.input[i + 1] for i, v in enumerate(statics)):
        fixed = statics + [None] * (4 - len(statics))
        return Apply(lambda x: _slice(x, *fixed)), [node.input[0]]
    return Apply(lambda x, *rest: _slice(x, *rest, *[None] * (4 - len(rest)))), _all_inputs(node)


def gather(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    axis = int(attrs(node).get("axis", 0))

    def run(x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        dim = axis % x.dim()
        flat = indices.reshape(-1).long() % x.shape[dim]
        picked = torch.index_select(x, dim, flat)
        return picked.reshape(*x.shape[:dim], *indices.shape, *x.shape[dim + 1 :])

    return Apply(run), _all_inputs(node)


def shape(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    found = attrs(node)
    start, end = found.get("start", 0), found.get("end")
    return Apply(lambda x: torch.tensor(list(x.shape)[start:end], dtype=torch.int64)), [
        node.input[0]
    ]


_DTYPES: dict[int, torch.dtype] = {
    onnx.TensorProto.FLOAT: torch.float32,
    onnx.TensorProto.DOUBLE: torch.float64,
    onnx.TensorProto.FLOAT16: torch.float16,
    onnx.TensorProto.INT64: torch.int64,
    onnx.TensorProto.INT32: torch.int32,
    onnx.TensorProto.INT8: torch.int8,
    onnx.TensorProto.UINT8: torch.uint8,
    onnx.TensorProto.BOOL: torch.bool,
}


def cast(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    to = int(attrs(node)["to"])
    if to not in _DTYPES:
        raise PassFailed(
            f"Cast node {node.name!r} casts to ONNX type {to}, which the bridge does not build."
        )
    dtype = _DTYPES[to]
    return Apply(lambda x: x.to(dtype)), [node.input[0]]


def dropout(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    if len(node.output) > 1 and node.output[1]:
        return Apply(lambda x: (x, torch.ones_like(x, dtype=torch.bool))), [node.input[0]]
    return Apply(lambda x: x), [node.input[0]]


def where(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    """Where(condition, x, y), broadcast as ONNX does (numpy's rules, as torch.where's)."""
    return Apply(torch.where), _all_inputs(node)


def expand(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    """Expand: broadcast `x` against the shape (both ways, a 1 in the shape keeps x's size)."""
    fixed = ctx.static_ints(node, 1)
    if fixed is not None:
        return Apply(lambda x: _expand(x, fixed)), [node.input[0]]
    return Apply(lambda x, s: _expand(x, s.tolist())), _all_inputs(node)


def _expand(x: torch.Tensor, shape: list[int]) -> torch.Tensor:
    return x.expand(torch.broadcast_shapes(tuple(x.shape), tuple(shape)))


def constant_of_shape(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    """ConstantOfShape: its value (a one-element tensor, default float 0) filling the shape; a
    shape the graph fixes is a tensor built once, one it computes is filled at run time."""
    found = attrs(node).get("value")
    value = numpy_helper.to_array(found) if found is not None else np.zeros(1, np.float32)
    fill = torch.from_numpy(np.array(value, copy=True).reshape(()))
    fixed = ctx.static_ints(node, 0)
    if fixed is not None:
        made = fill.expand(tuple(fixed)).clone()
        return Apply(lambda: made), []
    return Apply(lambda s: fill.expand(tuple(s.tolist())).clone()), [node.input[0]]
