"""ONNX graphs as trainable PyTorch modules, for quantization-aware training and exporters.

`to_torch(model)` builds an `nn.Module` whose forward takes the graph's inputs positionally and
returns a tuple of its outputs; Conv, ConvTranspose, Gemm and MatMul-by-a-constant become
`nn.Conv*d` / `nn.ConvTranspose*d` / `nn.Linear` submodules and every floating-point weight an
`nn.Parameter`, so fine-tuning and fake-quantization rules find them as usual. The op set is
closed (`supported_ops()`); a graph with any other op is refused with every such op named
(`UnsupportedOps`) before anything is built.

Why not a maintained converter: onnx2torch (the usual choice) declares torchvision as a
dependency and imports it when loaded (its NMS and RoIAlign converters), and no torchvision wheel
imports beside the torch 2.13 CPU wheel these machines keep; the bridge here needs torch only.

Importing this package never imports torch (`to_torch` loads the converter when called), so
`supported_ops()` and `UnsupportedOps` work without it and callers import it at the top.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from optistudio.core.loader import load
from optistudio.core.torch_bridge.support import (
    TORCH_EXTRA_HINT,
    UnsupportedOps,
    supported_ops,
    torch_available,
    unsupported_ops,
)

if TYPE_CHECKING:
    import onnx

    from optistudio.core.torch_bridge.module import OnnxModule

CONVERT = "optistudio.core.torch_bridge.convert:convert"

__all__ = [
    "TORCH_EXTRA_HINT",
    "UnsupportedOps",
    "supported_ops",
    "to_torch",
    "torch_available",
    "unsupported_ops",
]


def to_torch(model: onnx.ModelProto | Path | str) -> OnnxModule:
    """The ONNX model as a trainable `torch.nn.Module` (see the module docstring).

    Raises UnsupportedOps (listing every op outside `supported_ops()`) before building, and
    BackendUnavailable when torch is not installed.
    """
    module: OnnxModule = load(CONVERT)(model)  # the torch-importing half, loaded when used
    return module
