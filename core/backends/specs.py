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

COREML = BackendSpec(
    name="coreml",
    label="Core ML",
    description=(
        "Apple's runtime for macOS and iOS (CPU, GPU, Neural Engine). Optistudio exports Core ML "
        "packages (.mlpackage: FP32, FP16, INT8 weights) in the export bundle but does not run "
        "them: Core ML runs on macOS / iOS only, so this backend is listed as unavailable here."
    ),
    devices=["cpu", "gpu", "ane"],
    precisions=["fp32", "fp16", "int8"],
    implementation="optistudio.core.backends.coreml_backend:CoreMLBackend",
)

LITERT = BackendSpec(
    name="litert",
    label="LiteRT (TensorFlow Lite)",
    description=(
        "Google's on-device runtime (formerly TensorFlow Lite), run here with the ai-edge-litert "
        "interpreter and its XNNPACK CPU kernels. Runs .tflite files: FP32, FP16 weights, "
        "dynamic-range INT8 and full-integer INT8, converted from ONNX with onnx2tf by the "
        "optional `litert` extra (an .onnx model is converted to FP32 on load)."
    ),
    devices=["cpu"],
    precisions=["fp32", "fp16", "int8"],
    implementation="optistudio.core.backends.litert_backend:LiteRtBackend",
)
