"""ONNX graphs as exporters write them, built in code for the tests of the INT8 passes, the
OpenVINO backend and the optimization run.

tf2onnx's NHWC convolution (Transposes with a perm around the Conv, the weight itself behind a
Transpose), keras2onnx's Dense at IR 3 (MatMul + bias Add, every weight also a graph input), an
already-QDQ file (ONNX Runtime's own QDQ output, its nodes partly unnamed), a scalar head whose
Squeeze has no axes (dynamic rank) and a graph with an op no runtime knows.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Batches:
    """Seeded normal batches for named inputs of given shapes."""

    description = "random normal batches"

    def __init__(self, shapes: dict[str, tuple[int, ...]], count: int = 4) -> None:
        self.shapes, self.count = shapes, count

    def batches(self) -> Iterator[dict[str, np.ndarray]]:
        rng = np.random.default_rng(7)
        for _ in range(self.count):
            yield {
                name: rng.standard_normal(shape).astype(np.float32)
                for name, shape in self.shapes.items()
            }


def _weights(seed: int, **shapes: tuple[int, ...]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        name: (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]) or 1)).astype(np.float32)
        for name, shape in shapes.items()
    }


def _save(graph: onnx.GraphProto, path: Path, *, opset: int, ir: int) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir
    onnx.save(model, path)
    return path


def tf2onnx_nhwc_conv(path: Path) -> tuple[Path, dict[str, tuple[int, ...]]]:
    """x [N, 16, 16, 3] NHWC -> Transpose(0,3,1,2) -> Conv (weight: Transpose(3,2,0,1) of an
    HWIO initializer) -> Relu -> Transpose(0,2,3,1) -> Reshape -> MatMul (weight behind a
    Transpose too) + bias."""
    weights = _weights(3, w_hwio=(3, 3, 3, 8), b=(8,), fc_t=(4, 16 * 16 * 8), fc_b=(4,))
    weights["flat"] = np.array([-1, 16 * 16 * 8], np.int64)
    nodes = [
        helper.make_node("Transpose", ["x"], ["nchw"], perm=[0, 3, 1, 2], name="to_nchw"),
        helper.make_node("Transpose", ["w_hwio"], ["w"], perm=[3, 2, 0, 1], name="w_oihw"),
        helper.make_node("Conv", ["nchw", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Transpose", ["r"], ["nhwc"], perm=[0, 2, 3, 1], name="to_nhwc"),
        helper.make_node("Reshape", ["nhwc", "flat"], ["f"], name="flatten"),
        helper.make_node("Transpose", ["fc_t"], ["fc"], perm=[1, 0], name="fc_kernel"),
        helper.make_node("MatMul", ["f", "fc"], ["m"], name="dense"),
        helper.make_node("Add", ["m", "fc_b"], ["y"], name="dense_bias"),
    ]
    graph = helper.make_graph(
        nodes,
        "tf2onnx",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16, 16, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(value, name) for name, value in weights.items()],
    )
    return _save(graph, path, opset=13, ir=7), {"x": (2, 16, 16, 3)}


def keras2onnx_dense(path: Path, *, weights_as_inputs: bool) -> Path:
    """x [N, 16] -> Dense(32, relu) -> Dense(3) as MatMul + bias Add, at opset 9 and IR 3."""
    weights = _weights(4, w1=(16, 32), b1=(32,), w2=(32, 3), b2=(3,))
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"], name="dense/MatMul"),
        helper.make_node("Add", ["m1", "b1"], ["a1"], name="dense/BiasAdd"),
        helper.make_node("Relu", ["a1"], ["r1"], name="dense/Relu"),
        helper.make_node("MatMul", ["r1", "w2"], ["m2"], name="dense_1/MatMul"),
        helper.make_node("Add", ["m2", "b2"], ["y"], name="dense_1/BiasAdd"),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])]
    if weights_as_inputs:
        inputs += [
            helper.make_tensor_value_info(name, TensorProto.FLOAT, value.shape)
            for name, value in weights.items()
        ]
    graph = helper.make_graph(
        nodes,
        "keras2onnx",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(value, name) for name, value in weights.items()],
    )
    return _save(graph, path, opset=9, ir=3)


def already_qdq(path: Path) -> tuple[Path, dict[str, tuple[int, ...]]]:
    """A float CNN quantized to QDQ by ONNX Runtime itself: its Conv/Gemm nodes are unnamed."""
    from onnxruntime.quantization import QuantFormat, quantize_static

    weights = _weights(5, w1=(8, 3, 3, 3), b1=(8,), w2=(4, 8), b2=(4,))
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "w2", "b2"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(value, name) for name, value in weights.items()],
    )
    float_model = _save(graph, path.with_name("float.onnx"), opset=13, ir=8)
    shapes = {"x": (2, 3, 8, 8)}

    class Reader:
        def __init__(self) -> None:
            self.batches = iter(list(Batches(shapes).batches()))

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    quantize_static(str(float_model), str(path), Reader(), quant_format=QuantFormat.QDQ)
    return path, shapes


def dynamic_rank_squeeze(path: Path) -> Path:
    """x [N, 16] -> MatMul [16, 1] -> Squeeze with no axes: the output's rank depends on N."""
    weight = np.linspace(-1.0, 1.0, 16, dtype=np.float32).reshape(16, 1)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"], name="score"),
            helper.make_node("Squeeze", ["m"], ["y"], name="squeeze"),
        ],
        "scalar_head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def custom_op_model(path: Path, *, named: bool = True) -> Path:
    """x -> com.example.NoSuchOp -> Relu -> y: no shape inference knows the custom op."""
    nodes = [
        helper.make_node("NoSuchOp", ["x"], ["t"], domain="com.example", name="custom"),
        helper.make_node("Relu", ["t"], ["y"], name="relu" if named else ""),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.example", 1)],
    )
    onnx.save(model, path)
    return path
