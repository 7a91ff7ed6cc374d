"""A tiny stateful audio model, as streaming speech models are exported: audio, state, rate.

Inputs: `input` float32 [batch, time], `state` float32 [2, batch, 16] (layers first) and `sr`
int64 [] (a sample rate). It runs only when its inputs agree: the state's batch axis must equal
the audio's batch (a Concat along the layers), and `sr` must be 16000 (a Reshape of 16000
elements to [sr]). Outputs: `state_out` [3, batch, 16] and `checked` int64 [].
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SAMPLE_RATE = 16000


def build_audio_model(path: Path, *, batch: int | str = "batch") -> Path:
    """The model above; `batch` fixes the batch of `input` and `state` (e.g. 1)."""
    constants = {
        "axis1": np.array([1], np.int64),
        "axis0": np.array([0], np.int64),
        "repeats": np.array([1, 16], np.int64),
        "zero": np.array(0, np.int64),
        "one": np.array(1, np.int64),
        "rate": np.array(SAMPLE_RATE, np.int64),
    }
    nodes = [
        helper.make_node("ReduceSum", ["input", "axis1"], ["energy"], keepdims=1),
        helper.make_node("Tile", ["energy", "repeats"], ["tiled"]),
        helper.make_node("Unsqueeze", ["tiled", "axis0"], ["layer"]),
        helper.make_node("Concat", ["state", "layer"], ["state_out"], axis=0),
        helper.make_node("Range", ["zero", "rate", "one"], ["ticks"]),
        helper.make_node("Unsqueeze", ["sr", "axis0"], ["sr_shape"]),
        helper.make_node("Reshape", ["ticks", "sr_shape"], ["per_sample"]),
        helper.make_node("ReduceSum", ["per_sample"], ["checked"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "audio",
        [
            helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, "time"]),
            helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, batch, 16]),
            helper.make_tensor_value_info("sr", TensorProto.INT64, []),
        ],
        [
            helper.make_tensor_value_info("state_out", TensorProto.FLOAT, [3, batch, 16]),
            helper.make_tensor_value_info("checked", TensorProto.INT64, []),
        ],
        initializer=[numpy_helper.from_array(value, name) for name, value in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def build_anonymous_state_model(path: Path) -> Path:
    """The model above with the batch dim of `state` and `state_out` anonymous, as many
    exports leave it: state [2, ?, 16]. No dim name says that axis 1 is its batch."""
    model = onnx.load(build_audio_model(path))
    for value in (model.graph.input[1], model.graph.output[0]):
        value.type.tensor_type.shape.dim[1].Clear()
    onnx.save(model, path)
    return path
