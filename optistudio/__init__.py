"""Optistudio: benchmark, optimize and batch-serve ONNX models. The application shell (settings,
the command line, the process launcher) lives in the subpackages; the library's Python face is
four names, imported on first use so that `import optistudio.db` stays light:
`PipelineOptimizer` (dynamic batching, `optistudio.core.batching.pipeline_optimizer`; its
`from_file` serves a bundle's pipeline.json), `register_fusion_pattern` (in-process fusion
patterns, `optistudio.core.fusion.user`), `InferenceBackend` (a model on a registered backend,
`optistudio.core.backends.predictor`) and `DeviceType` (`InferenceBackend.create(DeviceType.CPU)`;
a device is also text in any case, "CPU" or "cpu").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from optistudio.core.loader import load

if TYPE_CHECKING:
    from optistudio.core.backends.base import DeviceType
    from optistudio.core.backends.predictor import Predictor as InferenceBackend
    from optistudio.core.batching.pipeline_optimizer import PipelineOptimizer
    from optistudio.core.fusion.user import register_fusion_pattern

_EXPORTS = {
    "DeviceType": "optistudio.core.backends.base:DeviceType",
    "PipelineOptimizer": "optistudio.core.batching.pipeline_optimizer:PipelineOptimizer",
    "register_fusion_pattern": "optistudio.core.fusion.user:register_fusion_pattern",
    "InferenceBackend": "optistudio.core.backends.predictor:Predictor",
}

__all__ = ["DeviceType", "InferenceBackend", "PipelineOptimizer", "register_fusion_pattern"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'optistudio' has no attribute {name!r}")
    value = load(_EXPORTS[name])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
