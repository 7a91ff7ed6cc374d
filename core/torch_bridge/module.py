"""The module `to_torch` returns: ONNX nodes run in graph order over a dict of named tensors."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn


class OnnxModule(nn.Module):
    """An ONNX graph as a module: forward(*graph inputs) -> tuple of graph outputs.

    Each node is a submodule in `nodes` (Conv as `nn.Conv*d`, Gemm/MatMul-by-a-constant as
    `nn.Linear` inside its step); initializers that nodes read at run time are parameters
    (floating point, more than one element) or buffers. `taps` holds modules applied to named
    tensors right after they are produced (graph inputs included): quantization-aware training
    puts its activation fake-quantizers there.
    """

    def __init__(
        self,
        steps: list[tuple[nn.Module, list[str], list[str]]],
        constants: dict[str, np.ndarray],
        inputs: list[str],
        outputs: list[str],
    ) -> None:
        super().__init__()
        self.input_names = list(inputs)
        self.output_names = list(outputs)
        self.nodes = nn.ModuleList(module for module, _, _ in steps)
        self._node_inputs = [list(names) for _, names, _ in steps]
        self._node_outputs = [list(names) for _, _, names in steps]
        self.weights = nn.ParameterDict()
        self._constant_keys: dict[str, str] = {}
        for index, (name, value) in enumerate(constants.items()):
            self._add_constant(f"c{index}_{_key(name)}", name, value)
        self.taps = nn.ModuleDict()
        self._tap_keys: dict[str, str] = {}

    def _add_constant(self, key: str, name: str, value: np.ndarray) -> None:
        tensor = torch.from_numpy(np.array(value, copy=True))
        if tensor.is_floating_point() and tensor.numel() > 1:
            self.weights[key] = nn.Parameter(tensor)
        else:
            self.register_buffer(key, tensor)
        self._constant_keys[name] = key

    def add_tap(self, tensor: str, module: nn.Module) -> None:
        """Apply `module` to tensor `tensor` (an ONNX tensor name) wherever it is produced."""
        key = f"t{len(self._tap_keys)}_{_key(tensor)}"
        self.taps[key] = module
        self._tap_keys[tensor] = key

    def tapped(self) -> dict[str, nn.Module]:
        """ONNX tensor name -> the module applied to it."""
        return {name: self.taps[key] for name, key in self._tap_keys.items()}

    def constant(self, name: str) -> torch.Tensor:
        """The parameter or buffer holding initializer `name`."""
        key = self._constant_keys[name]
        return self.weights[key] if key in self.weights else getattr(self, key)

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        env: dict[str, Any] = {name: self.constant(name) for name in self._constant_keys}
        for name, value in zip(self.input_names, args, strict=True):
            env[name] = self._tap(name, value)
        for module, names, outs in zip(
            self.nodes, self._node_inputs, self._node_outputs, strict=True
        ):
            result = module(*(env[name] if name else None for name in names))
            results = result if isinstance(result, tuple) else (result,)
            for name, value in zip(outs, results, strict=False):
                if name:
                    env[name] = self._tap(name, value)
        return tuple(env[name] for name in self.output_names)

    def _tap(self, name: str, value: torch.Tensor) -> torch.Tensor:
        key = self._tap_keys.get(name)
        return self.taps[key](value) if key is not None else value

    def onnx_weights(self) -> dict[str, np.ndarray]:
        """Every initializer the module holds, in ONNX layout, with its current value (after
        fine-tuning, these replace the original model's initializers name for name)."""
        found: dict[str, np.ndarray] = {}
        for module in self.nodes:
            export: Callable[[], dict[str, np.ndarray]] | None = getattr(
                module, "onnx_weights", None
            )
            if export is not None:
                found.update(export())
        for name in self._constant_keys:
            found[name] = self.constant(name).detach().cpu().numpy()
        return found


def _key(name: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]", "_", name)[:40]
