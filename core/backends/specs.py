"""Specs of the built-in backends, registered through entry points like any plug-in."""

from __future__ import annotations

from optistudio.core.backends.base import BackendSpec

ONNXRUNTIME = BackendSpec(
    name="onnxruntime",
    label="ONNX Runtime",
    description=(
        "Microsoft's cross-platform runtime. Runs every ONNX model on CPU; CUDA, TensorRT, "
        "OpenVINO, oneDNN and CANN (Huawei Ascend NPU) execution providers are used when the "
        "installed build has them."
    ),
    devices=["cpu", "cuda"],
    precisions=["fp32", "fp16", "int8"],
    implementation="optistudio.core.backends.onnxruntime_backend:OnnxRuntimeBackend",
)

OPENVINO = BackendSpec(
    name="openvino",
    label="OpenVINO",
    description=(
        "Intel's runtime, compiled natively for the CPU (and Intel GPU/NPU when present). Runs "
        "FP32, BF16 on CPUs with AVX-512 BF16 or AMX, FP16 on GPU, and INT8 from NNCF or QDQ "
        "models as they are; latency/throughput hints, streams and a compiled-model cache."
    ),
    devices=["cpu", "gpu", "npu"],
    precisions=["fp32", "bf16", "fp16", "int8"],
    implementation="optistudio.core.backends.openvino_backend:OpenVinoBackend",
)

TENSORRT = BackendSpec(
    name="tensorrt",
    label="TensorRT",
    description=(
        "NVIDIA's engine builder for CUDA GPUs: builds a serialized .engine from the ONNX model "
        "with FP16 or INT8 enabled, reuses a timing cache, and covers dynamic shapes with an "
        "optimization profile. Needs TensorRT 10 and a CUDA device."
    ),
    devices=["cuda"],
    precisions=["fp32", "fp16", "int8"],
    implementation="optistudio.core.backends.tensorrt_backend:TensorRtBackend",
)
