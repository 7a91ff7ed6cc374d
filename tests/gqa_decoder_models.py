"""A one-layer decoder built as ONNX Runtime GenAI's model builder writes its attention: the KV
cache through com.microsoft GroupQueryAttention, fed `seqlens_k` (the attention mask's sum - 1)
and `total_sequence_length` (its width) as int32, with genai_config.json beside it. Random
weights from a fixed seed: what the graph is made of matters here, not what it says."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HEADS, KV_HEADS, HEAD_DIM, VOCAB = 4, 2, 32, 256
HIDDEN = HEADS * HEAD_DIM


def _weights(seed: int) -> list[onnx.TensorProto]:
    rng = np.random.default_rng(seed)
    dims = {
        "embed": (VOCAB, HIDDEN),
        "wq": (HIDDEN, HIDDEN),
        "wk": (HIDDEN, KV_HEADS * HEAD_DIM),
        "wv": (HIDDEN, KV_HEADS * HEAD_DIM),
        "wo": (HIDDEN, HIDDEN),
        "lm_head": (HIDDEN, VOCAB),
    }
    return [
        numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)
        for name, shape in dims.items()
    ] + [
        numpy_helper.from_array(np.array([1], np.int64), "axis1"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
    ]


def _nodes() -> list[onnx.NodeProto]:
    make = helper.make_node
    attention = make(
        "GroupQueryAttention",
        ["q", "k", "v", "past_key_values.0.key", "past_key_values.0.value", "seqlens_k", "total"],
        ["attended", "present.0.key", "present.0.value"],
        domain="com.microsoft",
        num_heads=HEADS,
        kv_num_heads=KV_HEADS,
    )
    return [
        make("Gather", ["embed", "input_ids"], ["x"]),
        make("ReduceSum", ["attention_mask", "axis1"], ["mask_sum"], keepdims=0),
        make("Sub", ["mask_sum", "one"], ["last"]),
        make("Cast", ["last"], ["seqlens_k"], to=TensorProto.INT32),
        make("Shape", ["attention_mask"], ["mask_shape"]),
        make("Gather", ["mask_shape", "one"], ["width"], axis=0),
        make("Cast", ["width"], ["total"], to=TensorProto.INT32),
        make("MatMul", ["x", "wq"], ["q"]),
        make("MatMul", ["x", "wk"], ["k"]),
        make("MatMul", ["x", "wv"], ["v"]),
        attention,
        make("MatMul", ["attended", "wo"], ["h"]),
        make("MatMul", ["h", "lm_head"], ["logits"], name="lm_head"),
    ]


def build_gqa_decoder(folder: Path, *, seed: int = 0) -> Path:
    """`folder`/model.onnx with genai_config.json; returns the graph's path."""
    cache = ["batch_size", KV_HEADS, "past_sequence_length", HEAD_DIM]
    present = ["batch_size", KV_HEADS, "total_sequence_length", HEAD_DIM]
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "seq"]),
        helper.make_tensor_value_info(
            "attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"]
        ),
        helper.make_tensor_value_info("past_key_values.0.key", TensorProto.FLOAT, cache),
        helper.make_tensor_value_info("past_key_values.0.value", TensorProto.FLOAT, cache),
    ]
    outputs = [
        helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", "seq", VOCAB]),
        helper.make_tensor_value_info("present.0.key", TensorProto.FLOAT, present),
        helper.make_tensor_value_info("present.0.value", TensorProto.FLOAT, present),
    ]
    graph = helper.make_graph(_nodes(), "gqa_decoder", inputs, outputs, _weights(seed))
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, folder / "model.onnx")
    decoder = {
        "head_size": HEAD_DIM,
        "hidden_size": HIDDEN,
        "num_attention_heads": HEADS,
        "num_hidden_layers": 1,
        "num_key_value_heads": KV_HEADS,
        "filename": "model.onnx",
    }
    body = {"model": {"context_length": 128, "vocab_size": VOCAB, "decoder": decoder}}
    (folder / "genai_config.json").write_text(json.dumps(body))
    return folder / "model.onnx"
