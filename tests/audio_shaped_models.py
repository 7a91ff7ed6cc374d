"""Tiny audio classifiers whose inputs are audio only by their shape, as exporters name them
(input_1, x): a waveform [N, L], [N, L, 1] or [N, 1, L]; log-mel frames [N, 80, T]; STFT
magnitude frames [N, 1, T, 257]. Each ends in probabilities over 4 classes (a Softmax), so a
run recognizes classification and checks it on the samples it feeds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CLASSES = 4
WAVEFORM_LAYOUTS = {"NL": ["batch", "L"], "NL1": ["batch", "L", 1], "N1L": ["batch", 1, "L"]}


def waveform_classifier(path: Path, *, length: int = 16000, layout: str = "NL") -> Path:
    """input_1 as `layout` with L = `length` -> [N, 1, L] -> Conv1d(8, k 400, stride 160) ->
    Relu -> mean over time -> Gemm -> Softmax."""
    shape = [length if dim == "L" else dim for dim in WAVEFORM_LAYOUTS[layout]]
    rng = np.random.default_rng(0)
    weights = {
        "to_ncl": np.array([0, 1, length], np.int64),
        "w": rng.standard_normal((8, 1, 400)).astype(np.float32) * 0.05,
        "fc": rng.standard_normal((CLASSES, 8)).astype(np.float32),
        "fc_b": np.zeros(CLASSES, np.float32),
    }
    nodes = [
        helper.make_node("Reshape", ["input_1", "to_ncl"], ["ncl"]),
        helper.make_node("Conv", ["ncl", "w"], ["c"], strides=[160]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("ReduceMean", ["r"], ["pooled"], axes=[2], keepdims=0),
        *_head("pooled"),
    ]
    return _save(path, nodes, "input_1", shape, weights)


def mel_classifier(path: Path, *, bands: int = 80) -> Path:
    """x [N, bands, frames] -> Conv1d(16, k 3) -> Relu -> mean over time -> Gemm -> Softmax."""
    rng = np.random.default_rng(1)
    weights = {
        "w": rng.standard_normal((16, bands, 3)).astype(np.float32) * 0.02,
        "fc": rng.standard_normal((CLASSES, 16)).astype(np.float32),
        "fc_b": np.zeros(CLASSES, np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("ReduceMean", ["r"], ["pooled"], axes=[2], keepdims=0),
        *_head("pooled"),
    ]
    return _save(path, nodes, "x", ["batch", bands, "frames"], weights)


def stft_classifier(path: Path, *, bins: int = 257) -> Path:
    """x [N, 1, frames, bins] -> log(1 + x) -> mean over time -> MatMul to 16 -> Relu -> Gemm
    -> Softmax."""
    rng = np.random.default_rng(2)
    weights = {
        "one": np.array(1.0, np.float32),
        "proj": rng.standard_normal((bins, 16)).astype(np.float32) * 0.1,
        "fc": rng.standard_normal((CLASSES, 16)).astype(np.float32),
        "fc_b": np.zeros(CLASSES, np.float32),
    }
    nodes = [
        helper.make_node("Add", ["x", "one"], ["shifted"]),
        helper.make_node("Log", ["shifted"], ["logged"]),
        helper.make_node("ReduceMean", ["logged"], ["pooled"], axes=[1, 2], keepdims=0),
        helper.make_node("MatMul", ["pooled", "proj"], ["projected"]),
        helper.make_node("Relu", ["projected"], ["hidden"]),
        *_head("hidden"),
    ]
    return _save(path, nodes, "x", ["batch", 1, "frames", bins], weights)


def _head(features: str) -> list[onnx.NodeProto]:
    return [
        helper.make_node("Gemm", [features, "fc", "fc_b"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]


def _save(path: Path, nodes: list[onnx.NodeProto], name: str, shape: list, weights: dict) -> Path:
    graph = helper.make_graph(
        nodes,
        "audio_classifier",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", CLASSES])],
        initializer=[numpy_helper.from_array(value, key) for key, value in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path
