"""Zoo models built as exporters write them, convolutional and plain: Paddle2ONNX (dim_value -1),
the first ONNX model zoo (opset 7, IR 3, weights listed as inputs), caffe2 converts (IR 3,
weights not listed), an FP16 export, a model quantized with ONNX Runtime's quantize_static, a
model with external data and one calling an unregistered custom op. Weights are seeded, so a
builder always writes the same file. The shared pieces (weights, linear layers, layer norms,
saving) are used by bench/zoo_sequences.py too. Listed by bench/zoo_models.py.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEED = 0
FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64


def rng_for(salt: int) -> np.random.Generator:
    return np.random.default_rng([SEED, salt])


def weights_of(rng: np.random.Generator, *shape: int, scale: float | None = None) -> np.ndarray:
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
    std = scale if scale is not None else (2.0 / max(fan_in, 1)) ** 0.5
    return (rng.standard_normal(shape) * std).astype(np.float32)


def tensors(arrays: dict[str, np.ndarray]) -> list[onnx.TensorProto]:
    return [numpy_helper.from_array(value, name) for name, value in arrays.items()]


def model_of(
    graph: onnx.GraphProto, *, opset: int, ir_version: int, extra: dict[str, int] | None = None
) -> onnx.ModelProto:
    imports = [helper.make_opsetid("", opset)]
    imports += [helper.make_opsetid(domain, v) for domain, v in (extra or {}).items()]
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = ir_version
    return model


def save(model: onnx.ModelProto, path: Path, *, check: bool = True) -> Path:
    if check:
        onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def linear(
    nodes: list[onnx.NodeProto],
    w: dict[str, np.ndarray],
    rng: np.random.Generator,
    source: str,
    prefix: str,
    shape: tuple[int, int],
) -> str:
    w[f"{prefix}.weight"] = weights_of(rng, *shape, scale=0.05)
    w[f"{prefix}.bias"] = np.zeros(shape[1], np.float32)
    nodes += [
        helper.make_node("MatMul", [source, f"{prefix}.weight"], [f"{prefix}.mm"]),
        helper.make_node("Add", [f"{prefix}.mm", f"{prefix}.bias"], [f"{prefix}.out"]),
    ]
    return f"{prefix}.out"


def _conv_bn_relu(
    nodes: list[onnx.NodeProto],
    weights: dict[str, np.ndarray],
    rng: np.random.Generator,
    source: str,
    prefix: str,
    channels: tuple[int, int],
    *,
    stride: int = 1,
) -> str:
    """Conv (no bias) -> BatchNormalization -> Relu, named as Paddle2ONNX names them."""
    cin, cout = channels
    weights[f"{prefix}.w_0"] = weights_of(rng, cout, cin, 3, 3)
    bn = {
        "scale": (1 + 0.1 * rng.standard_normal(cout)).astype(np.float32),
        "bias": (0.1 * rng.standard_normal(cout)).astype(np.float32),
        "mean": (0.1 * rng.standard_normal(cout)).astype(np.float32),
        "var": (1 + 0.1 * rng.random(cout)).astype(np.float32),
    }
    for key, value in bn.items():
        weights[f"{prefix}_bn.{key}"] = value
    nodes += [
        helper.make_node(
            "Conv",
            [source, f"{prefix}.w_0"],
            [f"{prefix}.tmp_0"],
            name=f"{prefix}",
            pads=[1, 1, 1, 1],
            strides=[stride, stride],
        ),
        helper.make_node(
            "BatchNormalization",
            [f"{prefix}.tmp_0", *(f"{prefix}_bn.{k}" for k in bn)],
            [f"{prefix}_bn.tmp_0"],
            name=f"{prefix}_bn",
            epsilon=1e-5,
        ),
        helper.make_node("Relu", [f"{prefix}_bn.tmp_0"], [f"{prefix}_relu.tmp_0"]),
    ]
    return f"{prefix}_relu.tmp_0"


def _small_cnn_graph(
    name: str, shape: list[Any], *, input_name: str = "x", classes: int = 10
) -> tuple[list[onnx.NodeProto], dict[str, np.ndarray], str]:
    """Three conv-BN-ReLU stages, global pooling and a classifier head; returns the nodes,
    weights and the name of the logits."""
    rng = rng_for(len(name))
    nodes: list[onnx.NodeProto] = []
    weights: dict[str, np.ndarray] = {}
    current = input_name
    for index, (cin, cout, stride) in enumerate(((shape[1], 16, 2), (16, 32, 2), (32, 64, 2))):
        current = _conv_bn_relu(
            nodes, weights, rng, current, f"conv2d_{index}", (cin, cout), stride=stride
        )
    weights["fc_0.w_0"] = weights_of(rng, 64, classes)
    weights["fc_0.b_0"] = np.zeros(classes, np.float32)
    weights["reshape_shape"] = np.array([0, -1], np.int64)
    nodes += [
        helper.make_node("GlobalAveragePool", [current], ["pool2d_0.tmp_0"]),
        helper.make_node("Reshape", ["pool2d_0.tmp_0", "reshape_shape"], ["flatten_0.tmp_0"]),
        helper.make_node("MatMul", ["flatten_0.tmp_0", "fc_0.w_0"], ["fc_0.tmp_0"]),
        helper.make_node("Add", ["fc_0.tmp_0", "fc_0.b_0"], ["fc_0.tmp_1"]),
    ]
    return nodes, weights, "fc_0.tmp_1"


def build_paddle_cnn(folder: Path) -> Path:
    """As Paddle2ONNX writes a classifier: every dynamic dim stored as dim_value -1, Paddle's
    tensor names, opset 11, IR 6."""
    nodes, weights, logits = _small_cnn_graph("paddle", [-1, 3, 64, 64])
    nodes.append(helper.make_node("Softmax", [logits], ["save_infer_model/scale_0.tmp_1"], axis=1))
    graph = helper.make_graph(
        nodes,
        "paddle_cnn",
        [helper.make_tensor_value_info("x", FLOAT, [-1, 3, 64, 64])],
        [helper.make_tensor_value_info("save_infer_model/scale_0.tmp_1", FLOAT, [-1, 10])],
        initializer=tensors(weights),
    )
    model = model_of(graph, opset=11, ir_version=6)
    model.producer_name = "PaddlePaddle"
    # The checker refuses a negative dim_value; ONNX Runtime runs it, as it runs Paddle's files.
    return save(model, folder / "paddle_cnn.onnx", check=False)


def _fire(
    nodes: list[onnx.NodeProto],
    weights: dict[str, np.ndarray],
    rng: np.random.Generator,
    source: str,
    name: str,
    cin: int,
    squeeze: int,
    expand: int,
) -> str:
    """A SqueezeNet fire module: 1x1 squeeze, then 1x1 and 3x3 expands concatenated."""
    for suffix, shape in (
        ("squeeze1x1", (squeeze, cin, 1, 1)),
        ("expand1x1", (expand, squeeze, 1, 1)),
        ("expand3x3", (expand, squeeze, 3, 3)),
    ):
        weights[f"{name}_{suffix}_w_0"] = weights_of(rng, *shape)
        weights[f"{name}_{suffix}_b_0"] = np.zeros(shape[0], np.float32)
    nodes += [
        helper.make_node(
            "Conv",
            [source, f"{name}_squeeze1x1_w_0", f"{name}_squeeze1x1_b_0"],
            [f"{name}_s"],
            kernel_shape=[1, 1],
        ),
        helper.make_node("Relu", [f"{name}_s"], [f"{name}_sr"]),
        helper.make_node(
            "Conv",
            [f"{name}_sr", f"{name}_expand1x1_w_0", f"{name}_expand1x1_b_0"],
            [f"{name}_e1"],
            kernel_shape=[1, 1],
        ),
        helper.make_node("Relu", [f"{name}_e1"], [f"{name}_e1r"]),
        helper.make_node(
            "Conv",
            [f"{name}_sr", f"{name}_expand3x3_w_0", f"{name}_expand3x3_b_0"],
            [f"{name}_e3"],
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
        ),
        helper.make_node("Relu", [f"{name}_e3"], [f"{name}_e3r"]),
        helper.make_node("Concat", [f"{name}_e1r", f"{name}_e3r"], [f"{name}_concat"], axis=1),
    ]
    return f"{name}_concat"


def build_legacy_opset7(folder: Path) -> Path:
    """A SqueezeNet as the first ONNX model zoo shipped it: opset 7, IR 3, fixed batch 1, every
    weight also listed as a graph input (IR 3 required it), Dropout left in."""
    rng = rng_for(7)
    weights: dict[str, np.ndarray] = {
        "conv1_w_0": weights_of(rng, 32, 3, 3, 3),
        "conv1_b_0": np.zeros(32, np.float32),
        "conv10_w_0": weights_of(rng, 10, 64, 1, 1),
        "conv10_b_0": np.zeros(10, np.float32),
    }
    nodes = [
        helper.make_node(
            "Conv",
            ["data_0", "conv1_w_0", "conv1_b_0"],
            ["conv1"],
            kernel_shape=[3, 3],
            strides=[2, 2],
        ),
        helper.make_node("Relu", ["conv1"], ["conv1_r"]),
        helper.make_node("MaxPool", ["conv1_r"], ["pool1"], kernel_shape=[3, 3], strides=[2, 2]),
    ]
    current = _fire(nodes, weights, rng, "pool1", "fire2", 32, 8, 16)
    current = _fire(nodes, weights, rng, current, "fire3", 32, 8, 32)
    nodes += [
        helper.make_node("Dropout", [current], ["drop9"], ratio=0.5),
        helper.make_node(
            "Conv", ["drop9", "conv10_w_0", "conv10_b_0"], ["conv10"], kernel_shape=[1, 1]
        ),
        helper.make_node("Relu", ["conv10"], ["conv10_r"]),
        helper.make_node("GlobalAveragePool", ["conv10_r"], ["pool10"]),
        helper.make_node("Softmax", ["pool10"], ["softmaxout_1"]),
    ]
    listed = [helper.make_tensor_value_info("data_0", FLOAT, [1, 3, 64, 64])]
    listed += [helper.make_tensor_value_info(k, FLOAT, list(v.shape)) for k, v in weights.items()]
    graph = helper.make_graph(
        nodes,
        "squeezenet_legacy",
        listed,
        [helper.make_tensor_value_info("softmaxout_1", FLOAT, [1, 10, 1, 1])],
        initializer=tensors(weights),
    )
    return save(model_of(graph, opset=7, ir_version=3), folder / "legacy_opset7.onnx")


def build_ir3_unlisted(folder: Path) -> Path:
    """A caffe2-converted ResNet stem as opset 8, IR 3, whose weights are initializers but not
    graph inputs: invalid for onnx.checker at IR 3 ("conv1_w_0 in initializer but not in graph
    input"), yet ONNX Runtime loads and runs it."""
    rng = rng_for(3)
    weights = {
        "conv1_w_0": weights_of(rng, 16, 3, 7, 7),
        "res_conv1_bn_s": np.ones(16, np.float32),
        "res_conv1_bn_b": np.zeros(16, np.float32),
        "res_conv1_bn_rm": np.zeros(16, np.float32),
        "res_conv1_bn_riv": np.ones(16, np.float32),
        "res2_w_0": weights_of(rng, 16, 16, 3, 3),
        "pred_w_0": weights_of(rng, 10, 16),
        "pred_b_0": np.zeros(10, np.float32),
    }
    nodes = [
        helper.make_node(
            "Conv",
            ["gpu_0/data_0", "conv1_w_0"],
            ["conv1"],
            kernel_shape=[7, 7],
            strides=[2, 2],
            pads=[3, 3, 3, 3],
        ),
        helper.make_node(
            "BatchNormalization",
            ["conv1", "res_conv1_bn_s", "res_conv1_bn_b", "res_conv1_bn_rm", "res_conv1_bn_riv"],
            ["conv1_bn"],
        ),
        helper.make_node("Relu", ["conv1_bn"], ["conv1_r"]),
        helper.make_node(
            "MaxPool",
            ["conv1_r"],
            ["pool1"],
            kernel_shape=[3, 3],
            strides=[2, 2],
            pads=[1, 1, 1, 1],
        ),
        helper.make_node(
            "Conv", ["pool1", "res2_w_0"], ["res2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]
        ),
        helper.make_node("Sum", ["res2", "pool1"], ["res2_sum"]),
        helper.make_node("Relu", ["res2_sum"], ["res2_r"]),
        helper.make_node("GlobalAveragePool", ["res2_r"], ["pool5"]),
        helper.make_node("Flatten", ["pool5"], ["pool5_flat"]),
        helper.make_node("Gemm", ["pool5_flat", "pred_w_0", "pred_b_0"], ["pred"], transB=1),
        helper.make_node("Softmax", ["pred"], ["gpu_0/softmax_1"]),
    ]
    graph = helper.make_graph(
        nodes,
        "resnet_caffe2",
        [helper.make_tensor_value_info("gpu_0/data_0", FLOAT, [1, 3, 96, 96])],
        [helper.make_tensor_value_info("gpu_0/softmax_1", FLOAT, [1, 10])],
        initializer=tensors(weights),
    )
    return save(model_of(graph, opset=8, ir_version=3), folder / "ir3_unlisted.onnx", check=False)


def build_fp16_cnn(folder: Path) -> Path:
    """A CNN exported in half precision (model.half() before export): float16 inputs, weights
    and outputs, opset 17."""
    nodes, weights, logits = _small_cnn_graph("fp16cnn", ["batch", 3, 96, 96], input_name="images")
    nodes.append(helper.make_node("Identity", [logits], ["logits"]))
    half = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in weights.items()}
    graph = helper.make_graph(
        nodes,
        "cnn_fp16",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT16, ["batch", 3, 96, 96])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT16, ["batch", 10])],
        initializer=tensors(half),
    )
    return save(model_of(graph, opset=17, ir_version=8), folder / "fp16_cnn.onnx")


def _float_cnn(path: Path, *, side: int = 96) -> Path:
    nodes, weights, logits = _small_cnn_graph("qdq", ["batch", 3, side, side], input_name="input")
    nodes.append(helper.make_node("Identity", [logits], ["output"]))
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("input", FLOAT, ["batch", 3, side, side])],
        [helper.make_tensor_value_info("output", FLOAT, ["batch", 10])],
        initializer=tensors(weights),
    )
    return save(model_of(graph, opset=17, ir_version=8), path)


def build_qdq_cnn(folder: Path) -> Path:
    """A CNN quantized before upload by onnxruntime.quantization.quantize_static: QDQ format,
    per-channel weights, calibrated on seeded images."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    source = _float_cnn(folder / "source" / "cnn.onnx")
    rng = rng_for(13)
    batches = iter([{"input": rng.standard_normal((1, 3, 96, 96), np.float32)} for _ in range(8)])

    class Reader(CalibrationDataReader):
        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(batches, None)

    logging.getLogger().setLevel(logging.ERROR)  # the quantizer's pre-processing advice
    target = folder / "qdq_cnn.onnx"
    quantize_static(source, target, Reader(), quant_format=QuantFormat.QDQ, per_channel=True)
    shutil.rmtree(folder / "source", ignore_errors=True)
    return target


def build_external_data(folder: Path) -> Path:
    """An MLP whose weights sit in a side file (save_as_external_data, as exporters write models
    over 2 GB): model.onnx + external.onnx.data, dims batch x 512."""
    rng = rng_for(42)
    w, nodes, current = {}, [], "features"
    for index in range(4):
        current = linear(nodes, w, rng, current, f"fc{index}", (512, 512))
        if index < 3:
            nodes.append(helper.make_node("Relu", [current], [f"relu{index}"]))
            current = f"relu{index}"
    nodes.append(helper.make_node("Identity", [current], ["embedding"]))
    graph = helper.make_graph(
        nodes,
        "mlp_external",
        [helper.make_tensor_value_info("features", FLOAT, ["batch", 512])],
        [helper.make_tensor_value_info("embedding", FLOAT, ["batch", 512])],
        initializer=tensors(w),
    )
    model = model_of(graph, opset=17, ir_version=8)
    onnx.checker.check_model(model)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "external.onnx"
    onnx.save(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="external.onnx.data",
        size_threshold=1024,
    )
    return path


def build_custom_op(folder: Path) -> Path:
    """A model calling an operator of a custom domain that no runtime here registers (a
    TensorRT plugin, an ONNX Runtime extension not installed): intake must refuse it."""
    rng = rng_for(99)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"]),
            helper.make_node("FastGeluPlugin", ["h"], ["y"], domain="com.acme.plugins"),
        ],
        "plugin_model",
        [helper.make_tensor_value_info("x", FLOAT, ["batch", 32])],
        [helper.make_tensor_value_info("y", FLOAT, ["batch", 32])],
        initializer=tensors({"w": weights_of(rng, 32, 32)}),
    )
    model = model_of(graph, opset=17, ir_version=8, extra={"com.acme.plugins": 1})
    return save(model, folder / "custom_op.onnx")
