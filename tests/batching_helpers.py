"""Shared pieces of the batching tests: a real ORT session wrapped to record or hold batches."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from optistudio.core.backends import SessionOptions, get_backend


def build_double_model(path: Path) -> Path:
    """y = 2 * x with x of shape [batch, length]: one model taking many non-batch shapes."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["y"])],
        "double",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "length"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "length"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


class Recorder:
    """Runs a real session; records batch sizes; holds runs while `gate` is clear."""

    def __init__(self, model_path: Path) -> None:
        self.model = get_backend("onnxruntime").load(model_path, SessionOptions(threads=1))
        self.sizes: list[int] = []
        self.shapes: list[tuple[int, ...]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.poison: float | None = None

    def __call__(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        x = feeds["x"]
        self.sizes.append(int(x.shape[0]))
        self.shapes.append(tuple(x.shape))
        self.entered.set()
        assert self.gate.wait(10), "test gate never opened"
        if self.poison is not None and np.any(x == self.poison):
            raise RuntimeError("poisoned row in batch")
        return self.model.run(feeds)


def row(value: float, length: int = 16, rows: int = 1) -> dict[str, np.ndarray]:
    return {"x": np.full((rows, length), value, dtype=np.float32)}


def build_batch_mixing_model(path: Path) -> Path:
    """y = mean over the batch of x [1, 4]: a batch fixed at 1 whose free-batch rewrite is
    refused (the graph mixes the samples of a batch)."""
    graph = helper.make_graph(
        [helper.make_node("ReduceMean", ["x"], ["y"], axes=[0], keepdims=1)],
        "mixing",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path
