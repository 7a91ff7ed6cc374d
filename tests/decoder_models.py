"""A tiny decoder-only language model built in code, and the same model in numpy.

The graph has the KV-cache interface of Optimum's and ONNX Runtime GenAI's exports (input_ids,
attention_mask, position_ids, past_key_values.N.key/value in; logits, present.N.key/value out,
caches laid out [batch, kv_heads, sequence, head_dim]) and grouped-query attention (more query
heads than KV heads), with learned positions instead of rotary ones so that the numpy reference
stays short. Weights are random from a fixed seed: its tokens mean nothing, its numbers are exact.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


@dataclass(frozen=True)
class TinyShape:
    layers: int = 2
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 128
    vocab: int = 64
    positions: int = 128

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def tiny_weights(shape: TinyShape, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights, scaled so that logits spread over a few units (a peaked, varied argmax)."""
    rng = np.random.default_rng(seed)

    def normal(*dims: int, scale: float = 0.2) -> np.ndarray:
        return (rng.standard_normal(dims) * scale).astype(np.float32)

    kv = shape.kv_heads * shape.head_dim
    weights = {"embed": normal(shape.vocab, shape.hidden, scale=1.0)}
    weights["positions"] = normal(shape.positions, shape.hidden, scale=0.5)
    for i in range(shape.layers):
        weights |= {
            f"l{i}.norm1": 1 + normal(shape.hidden, scale=0.1),
            f"l{i}.q": normal(shape.hidden, shape.hidden),
            f"l{i}.k": normal(shape.hidden, kv),
            f"l{i}.v": normal(shape.hidden, kv),
            f"l{i}.o": normal(shape.hidden, shape.hidden),
            f"l{i}.norm2": 1 + normal(shape.hidden, scale=0.1),
            f"l{i}.gate": normal(shape.hidden, shape.ffn),
            f"l{i}.up": normal(shape.hidden, shape.ffn),
            f"l{i}.down": normal(shape.ffn, shape.hidden),
        }
    weights["final_norm"] = 1 + normal(shape.hidden, scale=0.1)
    weights["lm_head"] = normal(shape.hidden, shape.vocab, scale=0.5)
    return weights


class _Graph:
    """Nodes and constants under unique names."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def op(self, op_type: str, *inputs: str, **attrs: object) -> str:
        self._count += 1
        out = f"{op_type.lower()}_{self._count}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def const(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def ints(self, name: str, *values: int) -> str:
        return self.const(name, np.array(values, dtype=np.int64))


def _mask(g: _Graph) -> str:
    """Additive mask [B, 1, 1, S, T]: 0 where query s may see key t (causal, not padded)."""
    total = g.op("Gather", g.op("Shape", "attention_mask"), "one", axis=0)
    new = g.op("Gather", g.op("Shape", "input_ids"), "one", axis=0)
    keys = g.op("Unsqueeze", g.op("Range", "zero", total, "one"), "axis0")
    queries = g.op("Unsqueeze", g.op("Range", g.op("Sub", total, new), total, "one"), "axis1")
    causal = g.op("LessOrEqual", keys, queries)
    padding = g.op("Unsqueeze", g.op("Cast", "attention_mask", to=TensorProto.BOOL), "axes123")
    return g.op("Where", g.op("And", causal, padding), "zero_f", "minus_inf")


def _attention(g: _Graph, i: int, x: str, mask: str) -> str:
    q = g.op("MatMul", x, f"l{i}.q")
    q = g.op("Transpose", g.op("Reshape", q, "q_shape"), perm=[0, 2, 3, 1, 4])
    present: dict[str, str] = {}
    for part in ("key", "value"):
        t = g.op("MatMul", x, f"l{i}.{part[0]}")
        t = g.op("Transpose", g.op("Reshape", t, "kv_shape"), perm=[0, 2, 1, 3])
        present[part] = f"present.{i}.{part}"
        g.nodes.append(
            helper.make_node("Concat", [f"past_key_values.{i}.{part}", t], [present[part]], axis=2)
        )
    keys = g.op("Transpose", g.op("Unsqueeze", present["key"], "axis2"), perm=[0, 1, 2, 4, 3])
    scores = g.op("Add", g.op("Mul", g.op("MatMul", q, keys), "scale"), mask)
    probs = g.op("Softmax", scores, axis=-1)
    out = g.op("MatMul", probs, g.op("Unsqueeze", present["value"], "axis2"))
    out = g.op("Reshape", g.op("Transpose", out, perm=[0, 3, 1, 2, 4]), "hidden_shape")
    return g.op("MatMul", out, f"l{i}.o")


def _mlp(g: _Graph, i: int, x: str) -> str:
    gate = g.op("MatMul", x, f"l{i}.gate")
    silu = g.op("Mul", gate, g.op("Sigmoid", gate))
    return g.op("MatMul", g.op("Mul", silu, g.op("MatMul", x, f"l{i}.up")), f"l{i}.down")


def _constants(g: _Graph, shape: TinyShape) -> None:
    groups = shape.heads // shape.kv_heads
    g.ints("q_shape", 0, 0, shape.kv_heads, groups, shape.head_dim)
    g.ints("kv_shape", 0, 0, shape.kv_heads, shape.head_dim)
    g.ints("hidden_shape", 0, 0, shape.hidden)
    for name, axes in {"axis0": [0], "axis1": [1], "axis2": [2], "axes123": [1, 2, 3]}.items():
        g.ints(name, *axes)
    g.const("zero", np.array(0, dtype=np.int64))
    g.const("one", np.array(1, dtype=np.int64))
    g.const("zero_f", np.array(0.0, dtype=np.float32))
    g.const("minus_inf", np.array(-1e9, dtype=np.float32))
    g.const("scale", np.array(1 / np.sqrt(shape.head_dim), dtype=np.float32))


def build_tiny_decoder(
    folder: Path,
    shape: TinyShape = TinyShape(),
    *,
    seed: int = 0,
    config: str | None = "genai",
    tied: bool = False,
) -> Path:
    """`folder`/model.onnx, with genai_config.json ('genai'), config.json ('hf') or nothing.
    `tied`: the LM head is the embedding table transposed (as in GPT-2), not a weight of its own."""
    g = _Graph()
    weights = tiny_weights(shape, seed)
    for name, value in weights.items():
        g.const(name, value)
    _constants(g, shape)
    x = g.op(
        "Add", g.op("Gather", "embed", "input_ids"), g.op("Gather", "positions", "position_ids")
    )
    mask = _mask(g)
    for i in range(shape.layers):
        h = g.op("LayerNormalization", x, f"l{i}.norm1", axis=-1, epsilon=1e-5)
        x = g.op("Add", x, _attention(g, i, h, mask))
        h = g.op("LayerNormalization", x, f"l{i}.norm2", axis=-1, epsilon=1e-5)
        x = g.op("Add", x, _mlp(g, i, h))
    h = g.op("LayerNormalization", x, "final_norm", axis=-1, epsilon=1e-5)
    head = g.op("Transpose", "embed", perm=[1, 0]) if tied else "lm_head"
    g.nodes.append(helper.make_node("MatMul", [h, head], ["logits"], name="lm_head"))
    if tied:
        g.initializers = [t for t in g.initializers if t.name != "lm_head"]
    model = helper.make_model(
        helper.make_graph(
            g.nodes, "tiny_decoder", _inputs(shape), _outputs(shape), initializer=g.initializers
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, folder / "model.onnx")
    _write_config(folder, shape, config)
    return folder / "model.onnx"


def _inputs(shape: TinyShape) -> list[onnx.ValueInfoProto]:
    ids = [
        helper.make_tensor_value_info(name, TensorProto.INT64, dims)
        for name, dims in (
            ("input_ids", ["batch_size", "sequence_length"]),
            ("attention_mask", ["batch_size", "total_sequence_length"]),
            ("position_ids", ["batch_size", "sequence_length"]),
        )
    ]
    past = ["batch_size", shape.kv_heads, "past_sequence_length", shape.head_dim]
    return ids + [
        helper.make_tensor_value_info(f"past_key_values.{i}.{part}", TensorProto.FLOAT, past)
        for i in range(shape.layers)
        for part in ("key", "value")
    ]


def _outputs(shape: TinyShape) -> list[onnx.ValueInfoProto]:
    logits = ["batch_size", "sequence_length", shape.vocab]
    present = ["batch_size", shape.kv_heads, "total_sequence_length", shape.head_dim]
    return [helper.make_tensor_value_info("logits", TensorProto.FLOAT, logits)] + [
        helper.make_tensor_value_info(f"present.{i}.{part}", TensorProto.FLOAT, present)
        for i in range(shape.layers)
        for part in ("key", "value")
    ]


def _write_config(folder: Path, shape: TinyShape, config: str | None) -> None:
    if config == "genai":
        decoder = {
            "head_size": shape.head_dim,
            "hidden_size": shape.hidden,
            "num_attention_heads": shape.heads,
            "num_hidden_layers": shape.layers,
            "num_key_value_heads": shape.kv_heads,
        }
        body = {"model": {"context_length": shape.positions, "decoder": decoder}}
        body["model"]["vocab_size"] = shape.vocab
        (folder / "genai_config.json").write_text(json.dumps(body))
    elif config == "hf":
        body = {
            "model_type": "tiny",
            "hidden_size": shape.hidden,
            "num_attention_heads": shape.heads,
            "num_key_value_heads": shape.kv_heads,
            "max_position_embeddings": shape.positions,
            "vocab_size": shape.vocab,
        }
        (folder / "config.json").write_text(json.dumps(body))


# --- the same model in numpy -------------------------------------------------------------------


def _norm(x: np.ndarray, gain: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5) * gain


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def reference_logits(
    weights: dict[str, np.ndarray], shape: TinyShape, ids: np.ndarray
) -> np.ndarray:
    """Logits [T, vocab] of one sequence `ids` [T], computed without a cache, in float64."""
    w = {name: value.astype(np.float64) for name, value in weights.items()}
    steps = len(ids)
    x = w["embed"][ids] + w["positions"][np.arange(steps)]
    causal = np.tril(np.ones((steps, steps), dtype=bool))
    groups = shape.heads // shape.kv_heads
    for i in range(shape.layers):
        h = _norm(x, w[f"l{i}.norm1"])
        q = (h @ w[f"l{i}.q"]).reshape(steps, shape.heads, shape.head_dim)
        k = (h @ w[f"l{i}.k"]).reshape(steps, shape.kv_heads, shape.head_dim)
        v = (h @ w[f"l{i}.v"]).reshape(steps, shape.kv_heads, shape.head_dim)
        heads = []
        for head in range(shape.heads):
            kv = head // groups
            scores = q[:, head] @ k[:, kv].T / np.sqrt(shape.head_dim)
            heads.append(_softmax(np.where(causal, scores, -1e9)) @ v[:, kv])
        x = x + np.concatenate(heads, axis=-1) @ w[f"l{i}.o"]
        h = _norm(x, w[f"l{i}.norm2"])
        gate = h @ w[f"l{i}.gate"]
        x = x + (gate / (1 + np.exp(-gate)) * (h @ w[f"l{i}.up"])) @ w[f"l{i}.down"]
    return _norm(x, w["final_norm"]) @ w["lm_head"]


def reference_greedy(
    weights: dict[str, np.ndarray], shape: TinyShape, prompt: np.ndarray, new_tokens: int
) -> list[int]:
    """The tokens greedy decoding appends to `prompt`, recomputing the whole sequence each step."""
    ids = list(prompt)
    for _ in range(new_tokens):
        ids.append(int(reference_logits(weights, shape, np.array(ids))[-1].argmax()))
    return ids[len(prompt) :]
