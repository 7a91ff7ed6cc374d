"""Tiny models that run in ONNX Runtime only at some input sizes, built in code.

- `build_blocks`: an image [n, C, ?, ?] cut into k x k blocks by a Reshape to
  [n, H // k, W // k, C k k]; the element count matches only when k divides both sides, so
  ONNX Runtime's Reshape fails at any other size (k=64: 16 and 224 fail, 256 runs).
- `build_counted`: an image [n, C, ?, ?] reshaped to a constant [1, C x S x S]: it runs only at
  S x S (the constant implies S); with a count no square fills, at no square size at all.
- `build_token_blocks`: token ids [batch, sequence] cut into blocks of k the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build_blocks(
    path: Path,
    k: int,
    *,
    channels: int = 1,
    sides: tuple[object, object] = ("?", "?"),
    metadata: Mapping[str, str] | None = None,
) -> Path:
    """x [n, C, H, W] -> [n, H // k, W // k, C k k]: runs only where k divides H and W."""
    constants = {
        "zero": np.array([0], np.int64),
        "one": np.array([1], np.int64),
        "starts": np.array([2], np.int64),
        "ends": np.array([4], np.int64),
        "k": np.array([k], np.int64),
        "block": np.array([channels * k * k], np.int64),
    }
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Slice", ["shape", "zero", "one"], ["batch"]),
        helper.make_node("Slice", ["shape", "starts", "ends"], ["sides"]),
        helper.make_node("Div", ["sides", "k"], ["counts"]),
        helper.make_node("Concat", ["batch", "counts", "block"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", channels, *sides])
    return _save(path, nodes, [x], constants, metadata, out_rank=4)


def build_counted(path: Path, target: list[int], *, channels: int = 3) -> Path:
    """x [n, C, ?, ?] -> Reshape to the constant `target`: runs where C x H x W fills it."""
    nodes = [helper.make_node("Reshape", ["x", "target"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", channels, "?", "?"])
    constants = {"target": np.array(target, np.int64)}
    return _save(path, nodes, [x], constants, None, out_rank=len(target))


def build_token_blocks(path: Path, k: int) -> Path:
    """ids [batch, sequence] -> [batch, L // k, k]: runs only where k divides the length."""
    constants = {
        "zero": np.array([0], np.int64),
        "one": np.array([1], np.int64),
        "ends": np.array([2], np.int64),
        "k": np.array([k], np.int64),
    }
    nodes = [
        helper.make_node("Shape", ["ids"], ["shape"]),
        helper.make_node("Slice", ["shape", "zero", "one"], ["batch"]),
        helper.make_node("Slice", ["shape", "one", "ends"], ["length"]),
        helper.make_node("Div", ["length", "k"], ["counts"]),
        helper.make_node("Concat", ["batch", "counts", "k"], ["target"], axis=0),
        helper.make_node("Reshape", ["ids", "target"], ["y"]),
    ]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "sequence"])
    return _save(path, nodes, [ids], constants, None, out_rank=3, out_type=TensorProto.INT64)


def _save(
    path: Path,
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    constants: Mapping[str, np.ndarray],
    metadata: Mapping[str, str] | None,
    *,
    out_rank: int,
    out_type: int = TensorProto.FLOAT,
) -> Path:
    out_shape = [f"y{axis}" for axis in range(out_rank)]
    graph = helper.make_graph(
        nodes,
        path.stem,
        inputs,
        [helper.make_tensor_value_info("y", out_type, out_shape)],
        initializer=[numpy_helper.from_array(value, name) for name, value in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    for key, value in (metadata or {}).items():
        model.metadata_props.add(key=key, value=value)
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path
