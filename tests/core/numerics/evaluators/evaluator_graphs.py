"""Tiny ONNX graphs, one per kind of output an evaluator recognizes, built with onnx.helper."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FLOAT = TensorProto.FLOAT


def save(
    path: Path,
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    *,
    initializers: list[onnx.TensorProto] | None = None,
    metadata: dict[str, str] | None = None,
    opset: int = 17,
) -> Path:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=initializers or [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    for key, value in (metadata or {}).items():
        model.metadata_props.add(key=key, value=value)
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def tensor(name: str, shape: list, elem: int = FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def weight(name: str, shape: tuple[int, ...], seed: int = 0) -> onnx.TensorProto:
    values = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return numpy_helper.from_array(values, name)


def ctc_model(path: Path, classes: int = 37, *, metadata: dict[str, str] | None = None) -> Path:
    """feat [N, T, C] -> Softmax(axis=2) -> Squeeze-free probs [N, T, C]."""
    return save(
        path,
        [helper.make_node("Softmax", ["feat"], ["probs"], axis=2)],
        [tensor("feat", ["N", "T", classes])],
        [tensor("probs", ["N", "T", classes])],
        metadata=metadata,
    )


def ctc_logits_model(path: Path, classes: int, charset: list[str]) -> Path:
    """Raw logits [N, T, C] (a MatMul) with PaddleOCR's 'character' metadata."""
    return save(
        path,
        [helper.make_node("MatMul", ["feat", "W"], ["logits"])],
        [tensor("feat", ["N", "T", 8])],
        [tensor("logits", ["N", "T", classes])],
        initializers=[weight("W", (8, classes))],
        metadata={"character": "\n".join(charset)},
    )


def probability_map_model(path: Path) -> Path:
    """x [N, 3, H, W] -> mean over channels -> Sigmoid: a map [N, 1, H, W] like PP-OCR det."""
    return save(
        path,
        [
            helper.make_node("ReduceMean", ["x"], ["mean"], axes=[1], keepdims=1),
            helper.make_node("Sigmoid", ["mean"], ["map"]),
        ],
        [tensor("x", ["N", 3, "H", "W"])],
        [tensor("map", ["N", 1, "H", "W"])],
    )


def split_boxes_model(path: Path, *, batched: bool = True, with_classes: bool = True) -> Path:
    """Boxes [N, K, 4], scores [N, K] and classes [N, K] passed through Identity."""
    lead = ["N", "K"] if batched else ["K"]
    names = [("boxes", [*lead, 4], FLOAT), ("scores", lead, FLOAT)]
    if with_classes:
        names.append(("labels", lead, TensorProto.INT64))
    return save(
        path,
        [helper.make_node("Identity", [f"{name}_in"], [name]) for name, _, _ in names],
        [tensor(f"{name}_in", shape, elem) for name, shape, elem in names],
        [tensor(name, shape, elem) for name, shape, elem in names],
    )


def rows_boxes_model(path: Path, name: str = "output0") -> Path:
    """One output [N, 300, 6] of x1, y1, x2, y2, score, class (YOLOv10's layout)."""
    return save(
        path,
        [helper.make_node("Identity", ["rows_in"], [name])],
        [tensor("rows_in", ["N", 300, 6])],
        [tensor(name, ["N", 300, 6])],
    )


def segmentation_model(path: Path, classes: int = 21) -> Path:
    """x [N, 3, 64, 64] -> 1x1 Conv -> class scores [N, K, 64, 64]."""
    return save(
        path,
        [helper.make_node("Conv", ["x", "W"], ["out"])],
        [tensor("x", ["N", 3, 64, 64])],
        [tensor("out", ["N", classes, 64, 64])],
        initializers=[weight("W", (classes, 3, 1, 1))],
    )


def classifier_model(path: Path, classes: int = 10, seed: int = 0) -> Path:
    """x [N, 4] -> MatMul -> Add (bias): logits [N, C], a linear head."""
    return save(
        path,
        [
            helper.make_node("MatMul", ["x", "W"], ["h"]),
            helper.make_node("Add", ["h", "b"], ["logits"]),
        ],
        [tensor("x", ["N", 4])],
        [tensor("logits", ["N", classes])],
        initializers=[weight("W", (4, classes), seed), weight("b", (classes,), seed + 1)],
    )


def pooled_embedding_model(path: Path, name: str = "pooled") -> Path:
    """tokens [N, T, 16] -> ReduceMean over T: [N, 16], a pooled embedding."""
    return save(
        path,
        [helper.make_node("ReduceMean", ["tokens"], [name], axes=[1], keepdims=0)],
        [tensor("tokens", ["N", "T", 16])],
        [tensor(name, ["N", 16])],
    )


def named_embedding_model(path: Path) -> Path:
    """A Gemm head named sentence_embedding: named as an embedding, not a classifier."""
    return save(
        path,
        [helper.make_node("Gemm", ["x", "W"], ["sentence_embedding"])],
        [tensor("x", ["N", 8])],
        [tensor("sentence_embedding", ["N", 32])],
        initializers=[weight("W", (8, 32))],
    )


def regressor_model(path: Path) -> Path:
    """x [N, 4] -> MatMul [4, 1]: 'variable' [N, 1], as skl2onnx names a regressor's output."""
    return save(
        path,
        [helper.make_node("MatMul", ["x", "W"], ["variable"])],
        [tensor("x", ["N", 4])],
        [tensor("variable", ["N", 1])],
        initializers=[weight("W", (4, 1))],
    )


def unknown_model(path: Path) -> Path:
    """An output no task claims: [N, 4, 3] integers."""
    return save(
        path,
        [helper.make_node("Identity", ["x"], ["y"])],
        [tensor("x", ["N", 4, 3], TensorProto.INT32)],
        [tensor("y", ["N", 4, 3], TensorProto.INT32)],
    )


def yolo_model(
    path: Path,
    *,
    classes: int = 80,
    anchors: int | str = 8400,
    anchors_last: bool = True,
    name: str = "output0",
) -> Path:
    """Raw YOLO predictions before NMS: box values and Sigmoid class scores joined by Concat,
    [N, 4 + C, A] anchors last (YOLOv8 / v11) or [N, A, 5 + C] anchors first (YOLOv5)."""
    axis = 1 if anchors_last else 2
    scores = classes if anchors_last else classes + 1  # YOLOv5 adds objectness

    def shaped(values: int) -> list:
        return ["N", values, anchors] if anchors_last else ["N", anchors, values]

    return save(
        path,
        [
            helper.make_node("Sigmoid", ["cls_in"], ["cls"]),
            helper.make_node("Concat", ["box_in", "cls"], [name], axis=axis),
        ],
        [tensor("box_in", shaped(4)), tensor("cls_in", shaped(scores))],
        [tensor(name, shaped(4 + scores))],
    )


def indexed_rows_model(path: Path) -> Path:
    """NMS rows [K, 7] (batch index, x1, y1, x2, y2, class, score) made by a Concat."""
    return save(
        path,
        [helper.make_node("Concat", ["index", "rest"], ["dets"], axis=1)],
        [tensor("index", ["K", 1]), tensor("rest", ["K", 6])],
        [tensor("dets", ["K", 7])],
    )


def picodet_heads_model(path: Path, cells: tuple[int, ...] = (16, 4), classes: int = 3) -> Path:
    """Per-head Sigmoid class scores [N, A_i, C] and box distributions [N, A_i, 32] (4 sides x
    8 bins), as PicoDet exports them without post-processing."""
    nodes, inputs, outputs = [], [], []
    for head, count in enumerate(cells):
        nodes.append(helper.make_node("Sigmoid", [f"logit{head}"], [f"cls{head}"]))
        nodes.append(helper.make_node("Identity", [f"dist_in{head}"], [f"reg{head}"]))
        inputs += [
            tensor(f"logit{head}", ["N", count, classes]),
            tensor(f"dist_in{head}", ["N", count, 32]),
        ]
        outputs += [
            tensor(f"cls{head}", ["N", count, classes]),
            tensor(f"reg{head}", ["N", count, 32]),
        ]
    return save(path, nodes, inputs, outputs)


def picodet_image_model(
    path: Path,
    height: int,
    width: int,
    strides: tuple[int, ...] = (8, 16),
    classes: int = 3,
    *,
    dynamic: bool = False,
) -> Path:
    """A PicoDet-style detector on an image [1, 3, height, width]: per stride s a Conv of
    kernel and stride s makes (height / s) x (width / s) cells of class logits and box
    distributions (4 sides x 8 bins), reshaped to [1, cells, C] and sliced in two, the scores
    through a Sigmoid. Seeded weights, so random images give boxes. `dynamic`: the image's
    height and width, and so the cell counts, declared open."""
    channels = classes + 32
    constants = {
        "cells_shape": [0, channels, -1],
        "at_0": [0],
        "at_classes": [classes],
        "at_end": [channels],
        "last_axis": [2],
    }
    initializers = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in constants.items()]
    nodes, outputs = [], []
    for head, stride in enumerate(strides):
        cells = (height // stride) * (width // stride)
        initializers.append(weight(f"w{head}", (channels, 3, stride, stride), seed=head))
        nodes += [
            helper.make_node("Conv", ["image", f"w{head}"], [f"map{head}"], strides=[stride] * 2),
            helper.make_node("Reshape", [f"map{head}", "cells_shape"], [f"flat{head}"]),
            helper.make_node("Transpose", [f"flat{head}"], [f"all{head}"], perm=[0, 2, 1]),
            helper.make_node(
                "Slice", [f"all{head}", "at_0", "at_classes", "last_axis"], [f"logit{head}"]
            ),
            helper.make_node("Sigmoid", [f"logit{head}"], [f"cls{head}"]),
            helper.make_node(
                "Slice", [f"all{head}", "at_classes", "at_end", "last_axis"], [f"reg{head}"]
            ),
        ]
        count = f"cells{head}" if dynamic else cells
        outputs += [tensor(f"cls{head}", [1, count, classes]), tensor(f"reg{head}", [1, count, 32])]
    image = tensor("image", [1, 3, "H", "W"] if dynamic else [1, 3, height, width])
    return save(path, nodes, [image], outputs, initializers=initializers)


def argmax_ids_model(path: Path, classes: int = 37) -> Path:
    """A recognizer with the argmax inside: scores [N, T, C] -> ArgMax(axis=2) -> ids [N, T]."""
    return save(
        path,
        [helper.make_node("ArgMax", ["feat"], ["ids"], axis=2, keepdims=0)],
        [tensor("feat", ["N", "T", classes])],
        [tensor("ids", ["N", "T"], TensorProto.INT64)],
    )
