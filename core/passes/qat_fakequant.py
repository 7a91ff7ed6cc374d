"""Fake quantization that reproduces ONNX Runtime's static INT8 (QDQ) on a bridged module.

Where: exactly where ONNX Runtime's quantizer put QuantizeLinear nodes in a post-training
quantization of the same (pre-processed) model, read from that QDQ file: activation tensors
(ranges tracked by the taps) and Conv/Gemm/MatMul weights (per channel when it quantized them so).

The arithmetic is ONNX Runtime's. An activation with observed range [lo, hi] is widened to hold 0
(rmin = min(lo, 0), rmax = max(hi, 0)), then

    scale = (rmax - rmin) / (qmax - qmin),   zero_point = round(qmin - rmin / scale)
    x_q = (clamp(round(x / scale) + zero_point, qmin, qmax) - zero_point) * scale

with qmin, qmax = -128, 127 (INT8 activations). A weight is symmetric per output channel c:
scale_c = max|w_c| / q, zero point 0, values clamped to [-q, q], where q = 127 (or 64 for the
7-bit weights ONNX Runtime uses on CPUs without VNNI); q is read off the QDQ file's own scales.
The rounding passes gradients straight through (torch's fake_quantize ops). Tensors ONNX Runtime
quantizes with another tensor's scale (a MaxPool output shares its input's) follow that tensor's
quantizer without observing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from torch import nn
from torch.nn.utils import parametrize

from optistudio.core.torch_bridge.module import OnnxModule

ACT_QMIN, ACT_QMAX = -128, 127
WEIGHTED = ("Conv", "ConvTranspose", "Gemm", "MatMul")
_DQ_SUFFIX = "_DequantizeLinear_Output"


class ActivationQuant(nn.Module):
    """Fake-quantizes a tensor with a tracked range (exponential moving average of batch
    min/max while `observing`)."""

    low: torch.Tensor
    high: torch.Tensor

    def __init__(self, low: float, high: float, momentum: float = 0.05) -> None:
        super().__init__()
        self.register_buffer("low", torch.tensor(float(low)))
        self.register_buffer("high", torch.tensor(float(high)))
        self.momentum = momentum
        self.observing = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.observing and self.training:
            with torch.no_grad():
                m = self.momentum
                self.low.mul_(1 - m).add_(m * x.detach().min())
                self.high.mul_(1 - m).add_(m * x.detach().max())
        return self.quantize(x)

    def quantize(self, x: torch.Tensor) -> torch.Tensor:
        scale, zero_point = self.qparams()
        return torch.fake_quantize_per_tensor_affine(x, scale, zero_point, ACT_QMIN, ACT_QMAX)

    def qparams(self) -> tuple[torch.Tensor, torch.Tensor]:
        rmin, rmax = torch.clamp(self.low, max=0.0), torch.clamp(self.high, min=0.0)
        scale = torch.clamp((rmax - rmin) / (ACT_QMAX - ACT_QMIN), min=1e-12)
        zero_point = torch.clamp(torch.round(ACT_QMIN - rmin / scale), ACT_QMIN, ACT_QMAX)
        return scale.reshape(1), zero_point.to(torch.int32).reshape(1)

    def range(self) -> tuple[float, float]:
        return float(self.low), float(self.high)


class Follower(nn.Module):
    """Quantizes with another tensor's quantizer, without observing."""

    def __init__(self, leader: ActivationQuant) -> None:
        super().__init__()
        self.leader = [leader]  # a list: not a submodule, so not registered twice

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.leader[0].quantize(x)


class WeightQuant(nn.Module):
    """Symmetric fake quantization of a weight, per slice along `axis` (None: per tensor)."""

    def __init__(self, axis: int | None, levels: int) -> None:
        super().__init__()
        self.axis, self.levels = axis, levels

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        if self.axis is None:
            scale = torch.clamp(w.detach().abs().max() / self.levels, min=1e-12).reshape(1)
            zero = torch.zeros(1, dtype=torch.int32, device=w.device)
            return torch.fake_quantize_per_tensor_affine(w, scale, zero, -self.levels, self.levels)
        dims = [d for d in range(w.dim()) if d != self.axis]
        scale = torch.clamp(w.detach().abs().amax(dim=dims) / self.levels, min=1e-12)
        zero = torch.zeros_like(scale, dtype=torch.int32)
        return torch.fake_quantize_per_channel_affine(
            w, scale, zero, self.axis, -self.levels, self.levels
        )


@dataclass
class QdqLayout:
    """What ONNX Runtime quantized in a QDQ file, in the float model's tensor names."""

    activations: dict[str, str] = field(default_factory=dict)
    """Quantized activation tensor -> the tensor whose range sets its scale (itself or another)."""
    weights: dict[str, tuple[int | None, int]] = field(default_factory=dict)
    """Weight initializer -> (its ONNX axis of scales, None per tensor; levels q)."""


def read_layout(qdq: Path, float_model: onnx.ModelProto) -> QdqLayout:
    """Where the QDQ file quantizes, mapped back onto `float_model` (its pre-quantized form)."""
    graph = onnx.load(qdq).graph
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    produced = _tensor_names(float_model)
    float_inits = {i.name: numpy_helper.to_array(i) for i in float_model.graph.initializer}
    layout = QdqLayout()
    owners: dict[str, str] = {}
    dq_of = {n.input[0]: n for n in graph.node if n.op_type == "DequantizeLinear"}
    for node in graph.node:
        if node.op_type == "QuantizeLinear" and node.input[0] not in inits:
            name = node.input[0]
            if name not in produced:  # ONNX Runtime renamed a graph output: X_QuantizeLinear_Input
                name = dq_of[node.output[0]].output[0]
            owner = owners.setdefault(node.input[1], name)
            layout.activations[name] = owner
        elif node.op_type == "DequantizeLinear" and node.input[0] in inits:
            base = node.output[0].removesuffix(_DQ_SUFFIX)
            if node.output[0].endswith(_DQ_SUFFIX) and base in float_inits:
                scales = inits[node.input[1]].reshape(-1)
                axis = _axis(node) if scales.size > 1 else None
                layout.weights[base] = (axis, _levels(float_inits[base], scales, axis))
    return layout


def _axis(node: onnx.NodeProto) -> int:
    return next((int(a.i) for a in node.attribute if a.name == "axis"), 1)


def _levels(weight: np.ndarray, scales: np.ndarray, axis: int | None) -> int:
    """q such that scale = max|w| / q, per tensor or per slice along `axis`."""
    if axis is None:
        absmax = np.abs(weight).max(keepdims=True).reshape(-1)
    else:
        absmax = np.abs(np.moveaxis(weight, axis, 0)).reshape(scales.size, -1).max(axis=1)
    ratios = absmax / np.maximum(scales, 1e-30)
    ratios = ratios[ratios > 0]
    return int(round(float(np.median(ratios)))) if ratios.size else 127


def _tensor_names(model: onnx.ModelProto) -> set[str]:
    names = {i.name for i in model.graph.input}
    return names | {o for n in model.graph.node for o in n.output}


def attach(module: OnnxModule, layout: QdqLayout, ranges: dict[str, tuple[float, float]]) -> int:
    """Put activation taps and weight parametrizations on `module`; returns how many weights
    were fake-quantized."""
    leaders: dict[str, ActivationQuant] = {}
    for name, owner in layout.activations.items():
        if owner == name or owner not in layout.activations:
            low, high = ranges.get(name, (0.0, 1.0))
            leaders[name] = ActivationQuant(low, high)
    for name, owner in layout.activations.items():
        leader = leaders.get(name) or leaders.get(owner)
        if leader is None:
            continue
        module.add_tap(name, leader if name in leaders else Follower(leader))
    quantized = 0
    for step in module.nodes:
        layer = getattr(step, "conv", None) or getattr(step, "linear", None)
        weight_name = getattr(step, "names", (None,))[0]
        if layer is None or weight_name not in layout.weights:
            continue
        onnx_axis, levels = layout.weights[weight_name]
        axis = _torch_axis(step, onnx_axis)
        parametrize.register_parametrization(layer, "weight", WeightQuant(axis, levels))
        quantized += 1
    return quantized


def _torch_axis(step: nn.Module, onnx_axis: int | None) -> int | None:
    """The torch weight's axis of scales: a Conv keeps ONNX's layout; a Linear holds Gemm's
    or MatMul's B transposed unless Gemm had transB=1."""
    if onnx_axis is None or not hasattr(step, "linear"):
        return onnx_axis
    layout: dict[str, Any] = getattr(step, "layout", {})
    return onnx_axis if layout.get("trans_b") else 1 - onnx_axis


def set_observing(module: OnnxModule, observing: bool) -> None:
    for tap in module.taps.values():
        if isinstance(tap, ActivationQuant):
            tap.observing = observing


def trained_ranges(module: OnnxModule) -> dict[str, tuple[float, float]]:
    """The leaders' ranges by tensor name (what ONNX Runtime's quantizer is handed)."""
    return {
        name: tap.range()
        for name, tap in module.tapped().items()
        if isinstance(tap, ActivationQuant)
    }


def strip(module: OnnxModule) -> None:
    """Remove the weight parametrizations, keeping the float weights (for writing back)."""
    for layer in list(module.modules()):
        if parametrize.is_parametrized(layer, "weight"):
            parametrize.remove_parametrizations(layer, "weight", leave_parametrized=False)
