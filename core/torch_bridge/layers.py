"""Builders of the layers that carry weights or windows: Conv, ConvTranspose, Gemm, MatMul,
BatchNormalization and the pools.

ONNX pads list every spatial begin, then every end ([h0, w0, h1, w1]); torch's F.pad lists the
last dimension first ((w0, w1, h0, h1)). Symmetric pads go to the layer's own `padding`;
asymmetric or auto_pad=SAME pads are applied with F.pad before it (zeros for convolutions,
-inf for max pooling; average pooling divides by the padded ones when count_include_pad=0).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from torch import nn

from optistudio.core.errors import PassFailed
from optistudio.core.torch_bridge.context import BuildContext, attrs

Built = tuple[nn.Module, list[str]]


class Window:
    """Kernel, strides, pads, dilations and auto_pad of a Conv or pool node."""

    def __init__(self, node: onnx.NodeProto, kernel: list[int]) -> None:
        found = attrs(node)
        rank = len(kernel)
        self.kernel = kernel
        self.strides = list(found.get("strides", [1] * rank))
        self.dilations = list(found.get("dilations", [1] * rank))
        self.pads = list(found.get("pads", [0] * 2 * rank))
        auto_pad = found.get("auto_pad", b"NOTSET")
        self.auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
        if self.auto_pad == "VALID":
            self.pads = [0] * 2 * rank

    @property
    def same(self) -> bool:
        return self.auto_pad in ("SAME_UPPER", "SAME_LOWER")

    @property
    def symmetric(self) -> bool:
        rank = len(self.kernel)
        return not self.same and self.pads[:rank] == self.pads[rank:]

    def torch_pads(self, sizes: list[int]) -> list[int]:
        """F.pad's list for inputs of spatial `sizes` (resolving auto_pad=SAME)."""
        rank = len(self.kernel)
        begins, ends = self.pads[:rank], self.pads[rank:]
        if self.same:
            begins, ends = [], []
            for size, k, s, d in zip(sizes, self.kernel, self.strides, self.dilations, strict=True):
                total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
                small, large = total // 2, total - total // 2
                begins.append(small if self.auto_pad == "SAME_UPPER" else large)
                ends.append(large if self.auto_pad == "SAME_UPPER" else small)
        flat: list[int] = []
        for begin, end in zip(reversed(begins), reversed(ends), strict=True):
            flat += [begin, end]
        return flat


class ConvStep(nn.Module):
    """Conv / ConvTranspose: optional explicit padding, then the torch layer (`self.conv`),
    then cropping for ConvTranspose's pads."""

    conv: Any  # nn.Conv1d/2d/3d or nn.ConvTranspose1d/2d/3d

    def __init__(self, conv: nn.Module, window: Window, names: tuple[str, str | None]) -> None:
        super().__init__()
        self.conv = conv
        self.window = window
        self.names = names
        self.transposed = isinstance(conv, nn.modules.conv._ConvTransposeNd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.transposed:
            return self._crop(self.conv(x))
        if not self.window.symmetric:
            x = F.pad(x, self.window.torch_pads(list(x.shape[2:])))
        return self.conv(x)

    def _crop(self, y: torch.Tensor) -> torch.Tensor:
        rank = len(self.window.kernel)
        begins, ends = self.window.pads[:rank], self.window.pads[rank:]
        index = [slice(None), slice(None)]
        index += [
            slice(b, y.shape[2 + i] - e) for i, (b, e) in enumerate(zip(begins, ends, strict=True))
        ]
        return y[tuple(index)]

    def onnx_weights(self) -> dict[str, np.ndarray]:
        weight_name, bias_name = self.names
        found = {weight_name: self.conv.weight.detach().cpu().numpy()}
        if bias_name:
            found[bias_name] = self.conv.bias.detach().cpu().numpy()
        return found


_CONVS: dict[int, Any] = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
_TRANSPOSED: dict[int, Any] = {1: nn.ConvTranspose1d, 2: nn.ConvTranspose2d, 3: nn.ConvTranspose3d}


def conv(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    weight = ctx.weight(node, 1)
    bias = ctx.weight(node, 2) if len(node.input) > 2 and node.input[2] else None
    rank, groups = weight.ndim - 2, int(attrs(node).get("group", 1))
    window = Window(node, list(weight.shape[2:]))
    padding = window.pads[:rank] if window.symmetric else [0] * rank
    layer = _CONVS[rank](
        weight.shape[1] * groups,
        weight.shape[0],
        tuple(weight.shape[2:]),
        stride=tuple(window.strides),
        padding=tuple(padding),
        dilation=tuple(window.dilations),
        groups=groups,
        bias=bias is not None,
    )
    _load(layer, weight, bias)
    names = (node.input[1], node.input[2] if bias is not None else None)
    return ConvStep(layer, window, names), [node.input[0]]


def conv_transpose(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    found = attrs(node)
    if "output_shape" in found or found.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise PassFailed(
            f"ConvTranspose node {node.name!r} sets output_shape or auto_pad, which the PyTorch "
            "bridge does not build; give explicit pads instead."
        )
    weight = ctx.weight(node, 1)
    bias = ctx.weight(node, 2) if len(node.input) > 2 and node.input[2] else None
    rank, groups = weight.ndim - 2, int(found.get("group", 1))
    window = Window(node, list(weight.shape[2:]))
    layer = _TRANSPOSED[rank](
        weight.shape[0],
        weight.shape[1] * groups,
        tuple(weight.shape[2:]),
        stride=tuple(window.strides),
        output_padding=tuple(found.get("output_padding", [0] * rank)),
        dilation=tuple(window.dilations),
        groups=groups,
        bias=bias is not None,
    )
    _load(layer, weight, bias)
    names = (node.input[1], node.input[2] if bias is not None else None)
    return ConvStep(layer, window, names), [node.input[0]]


def _load(layer: Any, weight: np.ndarray, bias: np.ndarray | None) -> None:
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(weight))
        if bias is not None:
            layer.bias.copy_(torch.from_numpy(bias.reshape(-1)))


class LinearStep(nn.Module):
    """Gemm or MatMul by a constant matrix as `self.linear`; onnx_weights undoes the layout."""

    linear: Any  # nn.Linear

    def __init__(self, linear: nn.Linear, names: tuple[str, str | None], layout: dict[str, Any]):
        super().__init__()
        self.linear = linear
        self.names = names
        self.layout = layout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.transpose(-1, -2) if self.layout["trans_a"] else x)

    def onnx_weights(self) -> dict[str, np.ndarray]:
        weight_name, bias_name = self.names
        weight = self.linear.weight.detach().cpu().numpy() / self.layout["alpha"]
        found = {weight_name: weight if self.layout["trans_b"] else weight.T.copy()}
        if bias_name and self.linear.bias is not None:
            bias = self.linear.bias.detach().cpu().numpy() / self.layout["beta"]
            found[bias_name] = bias.reshape(self.layout["bias_shape"])
        return found


class GemmFunctional(nn.Module):
    """Gemm whose B is computed in the graph: alpha * A' @ B' + beta * C."""

    def __init__(self, alpha: float, beta: float, trans_a: bool, trans_b: bool) -> None:
        super().__init__()
        self.alpha, self.beta, self.trans_a, self.trans_b = alpha, beta, trans_a, trans_b

    def forward(
        self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None = None
    ) -> torch.Tensor:
        a = a.t() if self.trans_a else a
        b = b.t() if self.trans_b else b
        y = self.alpha * (a @ b)
        return y if c is None else y + self.beta * c


def gemm(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    found = attrs(node)
    alpha, beta = float(found.get("alpha", 1.0)), float(found.get("beta", 1.0))
    trans_a, trans_b = bool(found.get("transA", 0)), bool(found.get("transB", 0))
    b = ctx.constant(node.input[1])
    c_name = node.input[2] if len(node.input) > 2 else ""
    c = ctx.constant(c_name)
    if (
        b is None
        or b.ndim != 2
        or alpha == 0
        or (c_name and (c is None or c.size != b.shape[0 if trans_b else 1] or beta == 0))
    ):
        return GemmFunctional(alpha, beta, trans_a, trans_b), list(node.input)
    weight = (b if trans_b else b.T).astype(np.float32) * alpha
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=c is not None)
    bias = None if c is None else c.astype(np.float32).reshape(-1) * beta
    _load(linear, weight, bias)
    layout: dict[str, Any] = {"alpha": alpha, "beta": beta, "trans_a": trans_a, "trans_b": trans_b}
    layout["bias_shape"] = None if c is None else c.shape
    return LinearStep(linear, (node.input[1], c_name or None), layout), [node.input[0]]


class MatMulStep(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def matmul(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    b = ctx.constant(node.input[1])
    if b is None or b.ndim != 2 or not np.issubdtype(b.dtype, np.floating):
        return MatMulStep(), list(node.input)
    linear = nn.Linear(b.shape[0], b.shape[1], bias=False)
    _load(linear, b.T.astype(np.float32).copy(), None)
    layout = {"alpha": 1.0, "beta": 1.0, "trans_a": False, "trans_b": False, "bias_shape": None}
    return LinearStep(linear, (node.input[1], None), layout), [node.input[0]]


class BatchNormStep(nn.Module):
    """Inference-mode batch norm: running statistics fixed, scale and shift trainable (the
    usual choice when fine-tuning with small batches)."""

    mean: torch.Tensor
    var: torch.Tensor

    def __init__(self, ctx: BuildContext, node: onnx.NodeProto) -> None:
        super().__init__()
        self.names = list(node.input[1:5])
        scale, shift, mean, var = (ctx.weight(node, i) for i in range(1, 5))
        self.weight = nn.Parameter(torch.from_numpy(scale.copy()))
        self.bias = nn.Parameter(torch.from_numpy(shift.copy()))
        self.register_buffer("mean", torch.from_numpy(mean.copy()))
        self.register_buffer("var", torch.from_numpy(var.copy()))
        self.eps = float(attrs(node).get("epsilon", 1e-5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.batch_norm(x, self.mean, self.var, self.weight, self.bias, False, 0.0, self.eps)

    def onnx_weights(self) -> dict[str, np.ndarray]:
        values = (self.weight, self.bias, self.mean, self.var)
        return {n: v.detach().cpu().numpy() for n, v in zip(self.names, values, strict=True)}


def batch_norm(node: onnx.NodeProto, ctx: BuildContext) -> Built:
    if len([o for o in node.output if o]) > 1:
        raise PassFailed(
            f"BatchNormalization node {node.name!r} is in training mode (several outputs); "
            "the PyTorch bridge reads inference graphs only."
        )
    return BatchNormStep(ctx, node), [node.input[0]]


class PoolStep(nn.Module):
    """MaxPool / AveragePool with ONNX's padding rules (see the module docstring)."""

    def __init__(self, kind: str, window: Window, ceil_mode: bool, count_pad: bool) -> None:
        super().__init__()
        self.kind, self.window, self.ceil_mode, self.count_pad = kind, window, ceil_mode, count_pad
        rank = len(window.kernel)
        self.pool: Callable[..., torch.Tensor] = {"max": _MAX[rank], "avg": _AVG[rank]}[kind]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.window
        pads = w.torch_pads(list(x.shape[2:]))
        if self.kind == "max":
            x = F.pad(x, pads, value=-math.inf) if any(pads) else x
            return self.pool(x, w.kernel, w.strides, 0, w.dilations, self.ceil_mode)
        mean = self.pool(F.pad(x, pads), w.kernel, w.strides, 0, self.ceil_mode)
        if self.count_pad or not any(pads):
            return mean
        ones = F.pad(torch.ones_like(x[:1, :1]), pads)
        return mean / self.pool(ones, w.kernel, w.strides, 0, self.ceil_mode)


_MAX: dict[int, Any] = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVG: dict[int, Any] = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


def pool(kind: str):  # type: ignore[no-untyped-def]
    def build(node: onnx.NodeProto, ctx: BuildContext) -> Built:
        found = attrs(node)
        if len([o for o in node.output if o]) > 1:
            raise PassFailed(f"MaxPool node {node.name!r} returns indices; the bridge does not.")
        window = Window(node, list(found["kernel_shape"]))
        ceil_mode = bool(found.get("ceil_mode", 0))
        count_pad = bool(found.get("count_include_pad", 0))
        return PoolStep(kind, window, ceil_mode, count_pad), [node.input[0]]

    return build


class GlobalPool(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dims = tuple(range(2, x.dim()))
        return x.mean(dims, keepdim=True) if self.kind == "avg" else x.amax(dims, keepdim=True)
