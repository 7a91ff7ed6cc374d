"""Specs of the built-in backends, registered through entry points like any plug-in."""

from __future__ import annotations

from core.backends.base import BackendSpec

ONNXRUNTIME = BackendSpec(
    name="onnxruntime",
    label="ONNX Runtime",
    description=(
        "Microsoft's cross-platform runtime. Runs every ONNX model on CPU; CUDA, TensorRT and "
        "OpenVINO execution providers are used when the installed build has them."
    ),
    devices=["cpu"],
    precisions=["fp32", "fp16", "int8"],
    implementation="core.backends.onnxruntime_backend:OnnxRuntimeBackend",
)
