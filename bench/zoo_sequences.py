"""Zoo models of sequences, built as exporters write them: a BERT-style encoder as torch.onnx
exports it at opset 14 (LayerNorm decomposed) and the same after ONNX Runtime's offline
optimization (contrib ops), a transformer block at opset 21, a Silero-style streaming VAD (LSTM
state [2, batch, 64], an If on its int64 sample-rate input) and a greedy GRU decoder in a Loop.
Weights are seeded. Listed by bench/zoo_models.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper
from zoo_graphs import FLOAT, INT64, linear, model_of, rng_for, save, tensors, weights_of


def _encoder(
    *,
    vocab: int,
    hidden: int,
    heads: int,
    layers: int,
    opset: int,
    name: str,
) -> onnx.GraphProto:
    """A BERT-style encoder as torch.onnx exports it: embeddings (word, position, token type),
    then per layer self-attention with the additive mask and a GELU feed-forward, LayerNorm
    decomposed below opset 17 (ReduceMean, Sub, Pow, Sqrt, Div) and native from 17 on."""
    rng = rng_for(opset)
    w: dict[str, np.ndarray] = {
        "embeddings.word": weights_of(rng, vocab, hidden, scale=0.05),
        "embeddings.position": weights_of(rng, 512, hidden, scale=0.05),
        "embeddings.token_type": weights_of(rng, 2, hidden, scale=0.05),
        "c.zero": np.array([0], np.int64),
        "c.one": np.array([1], np.int64),
        "c.axis12": np.array([1, 2], np.int64),
        "c.neg": np.array(-10000.0, np.float32),
        "c.onef": np.array(1.0, np.float32),
        "c.heads": np.array([0, 0, heads, hidden // heads], np.int64),
        "c.merge": np.array([0, 0, hidden], np.int64),
        "c.scale": np.array(1 / np.sqrt(hidden // heads), np.float32),
        "c.sqrt2": np.array(np.sqrt(2.0), np.float32),
        "c.half": np.array(0.5, np.float32),
    }
    nodes = [
        helper.make_node("Shape", ["input_ids"], ["ids_shape"]),
        helper.make_node("Gather", ["ids_shape", "c.one"], ["seq_len"], axis=0),
        helper.make_node(
            "Squeeze",
            ["seq_len", "c.zero"] if opset >= 13 else ["seq_len"],
            ["seq_scalar"],
            **({} if opset >= 13 else {"axes": [0]}),
        ),
        helper.make_node("Range", ["c.zero_s", "seq_scalar", "c.one_s"], ["positions"]),
        helper.make_node("Gather", ["embeddings.word", "input_ids"], ["e_word"]),
        helper.make_node("Gather", ["embeddings.position", "positions"], ["e_pos"]),
        helper.make_node("Gather", ["embeddings.token_type", "token_type_ids"], ["e_type"]),
        helper.make_node("Add", ["e_word", "e_pos"], ["e_wp"]),
        helper.make_node("Add", ["e_wp", "e_type"], ["e_sum"]),
        # mask [B, S] -> additive [B, 1, 1, S]
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=FLOAT),
        _unsqueeze("mask_f", "mask_4d", [1, 2], opset),
        helper.make_node("Sub", ["c.onef", "mask_4d"], ["mask_inv"]),
        helper.make_node("Mul", ["mask_inv", "c.neg"], ["mask_add"]),
    ]
    w["c.zero_s"] = np.array(0, np.int64)
    w["c.one_s"] = np.array(1, np.int64)
    current = _layer_norm(nodes, w, rng, "e_sum", "embeddings.ln", hidden, opset)
    for layer in range(layers):
        current = _encoder_layer(nodes, w, rng, current, f"layer.{layer}", hidden, opset)
    w["pooler.w"] = weights_of(rng, hidden, hidden)
    w["pooler.b"] = np.zeros(hidden, np.float32)
    nodes += [
        helper.make_node("Gather", [current, "c.zero_s"], ["cls"], axis=1),
        helper.make_node("Gemm", ["cls", "pooler.w", "pooler.b"], ["pooled"]),
        helper.make_node("Tanh", ["pooled"], ["pooler_output"]),
        helper.make_node("Identity", [current], ["last_hidden_state"]),
    ]
    ids = ["batch", "sequence"]
    return helper.make_graph(
        nodes,
        name,
        [
            helper.make_tensor_value_info("input_ids", INT64, ids),
            helper.make_tensor_value_info("attention_mask", INT64, ids),
            helper.make_tensor_value_info("token_type_ids", INT64, ids),
        ],
        [
            helper.make_tensor_value_info("last_hidden_state", FLOAT, [*ids, hidden]),
            helper.make_tensor_value_info("pooler_output", FLOAT, ["batch", hidden]),
        ],
        initializer=tensors(w),
    )


def _unsqueeze(source: str, target: str, axes: list[int], opset: int) -> onnx.NodeProto:
    if opset >= 13:  # axes became an input; only [1, 2] (the mask) is unsqueezed here
        return helper.make_node("Unsqueeze", [source, "c.axis12"], [target])
    return helper.make_node("Unsqueeze", [source], [target], axes=axes)


def _layer_norm(
    nodes: list[onnx.NodeProto],
    w: dict[str, np.ndarray],
    rng: np.random.Generator,
    source: str,
    prefix: str,
    hidden: int,
    opset: int,
) -> str:
    w[f"{prefix}.weight"] = (1 + 0.05 * rng.standard_normal(hidden)).astype(np.float32)
    w[f"{prefix}.bias"] = (0.05 * rng.standard_normal(hidden)).astype(np.float32)
    out = f"{prefix}.out"
    if opset >= 17:
        nodes.append(
            helper.make_node(
                "LayerNormalization",
                [source, f"{prefix}.weight", f"{prefix}.bias"],
                [out],
                axis=-1,
                epsilon=1e-12,
            )
        )
        return out
    w.setdefault("c.two", np.array(2.0, np.float32))
    w.setdefault("c.eps", np.array(1e-12, np.float32))
    nodes += [
        helper.make_node("ReduceMean", [source], [f"{prefix}.mean"], axes=[-1]),
        helper.make_node("Sub", [source, f"{prefix}.mean"], [f"{prefix}.centered"]),
        helper.make_node("Pow", [f"{prefix}.centered", "c.two"], [f"{prefix}.sq"]),
        helper.make_node("ReduceMean", [f"{prefix}.sq"], [f"{prefix}.var"], axes=[-1]),
        helper.make_node("Add", [f"{prefix}.var", "c.eps"], [f"{prefix}.var_eps"]),
        helper.make_node("Sqrt", [f"{prefix}.var_eps"], [f"{prefix}.std"]),
        helper.make_node("Div", [f"{prefix}.centered", f"{prefix}.std"], [f"{prefix}.norm"]),
        helper.make_node("Mul", [f"{prefix}.norm", f"{prefix}.weight"], [f"{prefix}.scaled"]),
        helper.make_node("Add", [f"{prefix}.scaled", f"{prefix}.bias"], [out]),
    ]
    return out


def _encoder_layer(
    nodes: list[onnx.NodeProto],
    w: dict[str, np.ndarray],
    rng: np.random.Generator,
    source: str,
    prefix: str,
    hidden: int,
    opset: int,
) -> str:
    heads_of = {}
    for part in ("query", "key", "value"):
        projected = linear(nodes, w, rng, source, f"{prefix}.{part}", (hidden, hidden))
        nodes += [
            helper.make_node("Reshape", [projected, "c.heads"], [f"{prefix}.{part}.split"]),
            helper.make_node(
                "Transpose",
                [f"{prefix}.{part}.split"],
                [f"{prefix}.{part}.t"],
                perm=[0, 2, 3, 1] if part == "key" else [0, 2, 1, 3],
            ),
        ]
        heads_of[part] = f"{prefix}.{part}.t"
    p = prefix
    nodes += [
        helper.make_node("MatMul", [heads_of["query"], heads_of["key"]], [f"{p}.scores"]),
        helper.make_node("Mul", [f"{p}.scores", "c.scale"], [f"{p}.scaled"]),
        helper.make_node("Add", [f"{p}.scaled", "mask_add"], [f"{p}.masked"]),
        helper.make_node("Softmax", [f"{p}.masked"], [f"{p}.probs"], axis=-1),
        helper.make_node("MatMul", [f"{p}.probs", heads_of["value"]], [f"{p}.context"]),
        helper.make_node("Transpose", [f"{p}.context"], [f"{p}.context.t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", [f"{p}.context.t", "c.merge"], [f"{p}.merged"]),
    ]
    attended = linear(nodes, w, rng, f"{p}.merged", f"{p}.attention.output", (hidden, hidden))
    nodes.append(helper.make_node("Add", [attended, source], [f"{p}.residual1"]))
    normed = _layer_norm(nodes, w, rng, f"{p}.residual1", f"{p}.attention.ln", hidden, opset)
    up = linear(nodes, w, rng, normed, f"{p}.intermediate", (hidden, 4 * hidden))
    nodes += [  # exact GELU as torch exports it: x * 0.5 * (1 + erf(x / sqrt 2))
        helper.make_node("Div", [up, "c.sqrt2"], [f"{p}.gelu.div"]),
        helper.make_node("Erf", [f"{p}.gelu.div"], [f"{p}.gelu.erf"]),
        helper.make_node("Add", [f"{p}.gelu.erf", "c.onef"], [f"{p}.gelu.add"]),
        helper.make_node("Mul", [up, f"{p}.gelu.add"], [f"{p}.gelu.mul"]),
        helper.make_node("Mul", [f"{p}.gelu.mul", "c.half"], [f"{p}.gelu"]),
    ]
    down = linear(nodes, w, rng, f"{p}.gelu", f"{p}.output", (4 * hidden, hidden))
    nodes.append(helper.make_node("Add", [down, normed], [f"{p}.residual2"]))
    return _layer_norm(nodes, w, rng, f"{p}.residual2", f"{p}.output.ln", hidden, opset)


def build_bert_opset14(folder: Path) -> Path:
    """A 2-layer BERT-style encoder exported at opset 14 (LayerNorm decomposed), named dims
    batch and sequence on its three int64 inputs."""
    graph = _encoder(vocab=1000, hidden=128, heads=4, layers=2, opset=14, name="bert_tiny")
    return save(model_of(graph, opset=14, ir_version=7), folder / "bert_opset14.onnx")


def build_bert_ort_optimized(folder: Path) -> Path:
    """The opset-14 encoder after ONNX Runtime's offline optimization (extended level), as
    users save it with optimized_model_filepath: com.microsoft contrib ops (SkipLayerNorm,
    Gelu, FusedMatMul ...) that onnx.checker does not know."""
    import onnxruntime as ort

    source = build_bert_opset14(folder / "source")
    target = folder / "bert_ort_optimized.onnx"
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(target)
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    shutil.rmtree(folder / "source", ignore_errors=True)
    return target


def build_opset21(folder: Path) -> Path:
    """A pre-norm encoder block at opset 21, IR 10: native LayerNormalization and Gelu
    (opset 20), float features [batch, tokens, 96]."""
    rng = rng_for(21)
    w: dict[str, np.ndarray] = {
        "c.heads": np.array([0, 0, 4, 24], np.int64),
        "c.merge": np.array([0, 0, 96], np.int64),
        "c.scale": np.array(1 / np.sqrt(24), np.float32),
    }
    nodes: list[onnx.NodeProto] = []
    normed = _layer_norm(nodes, w, rng, "features", "ln1", 96, 21)
    heads = {}
    for part in ("q", "k", "v"):
        out = linear(nodes, w, rng, normed, part, (96, 96))
        nodes += [
            helper.make_node("Reshape", [out, "c.heads"], [f"{part}.split"]),
            helper.make_node(
                "Transpose",
                [f"{part}.split"],
                [f"{part}.t"],
                perm=[0, 2, 3, 1] if part == "k" else [0, 2, 1, 3],
            ),
        ]
        heads[part] = f"{part}.t"
    nodes += [
        helper.make_node("MatMul", [heads["q"], heads["k"]], ["scores"]),
        helper.make_node("Mul", ["scores", "c.scale"], ["scaled"]),
        helper.make_node("Softmax", ["scaled"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", heads["v"]], ["context"]),
        helper.make_node("Transpose", ["context"], ["context.t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["context.t", "c.merge"], ["merged"]),
    ]
    attended = linear(nodes, w, rng, "merged", "proj", (96, 96))
    nodes.append(helper.make_node("Add", ["features", attended], ["residual"]))
    normed2 = _layer_norm(nodes, w, rng, "residual", "ln2", 96, 21)
    up = linear(nodes, w, rng, normed2, "fc1", (96, 384))
    nodes.append(helper.make_node("Gelu", [up], ["gelu"], approximate="tanh"))
    down = linear(nodes, w, rng, "gelu", "fc2", (384, 96))
    nodes.append(helper.make_node("Add", ["residual", down], ["tokens_out"]))
    graph = helper.make_graph(
        nodes,
        "block_opset21",
        [helper.make_tensor_value_info("features", FLOAT, ["batch", "tokens", 96])],
        [helper.make_tensor_value_info("tokens_out", FLOAT, ["batch", "tokens", 96])],
        initializer=tensors(w),
    )
    return save(model_of(graph, opset=21, ir_version=10), folder / "opset21.onnx")


# --- stateful sequence models ----------------------------------------------------------------


def build_vad_stateful(folder: Path) -> Path:
    """A streaming voice-activity model laid out as Silero VAD exports: audio `input` [batch,
    time], LSTM `state` [2, batch, 64] (h and c, layers first) and int64 scalar `sr`. An If on
    sr == 16000 picks the 16 kHz or 8 kHz front end; frames are sr / 125 samples (128 at
    16 kHz), so a sample rate other than 16000 or 8000 makes no frames and the run fails."""
    rng = rng_for(16)
    hidden = 64
    then_graph = _vad_branch("then16k", weights_of(rng, 128, 32), rng)
    else_graph = _vad_branch("else8k", weights_of(rng, 64, 32), rng)
    w = {
        "c.16k": np.array(16000, np.int64),
        "c.frame_rate": np.array(125, np.int64),
        "c.axis0": np.array([0], np.int64),
        "lstm.W": weights_of(rng, 1, 4 * hidden, 32, scale=0.1),
        "lstm.R": weights_of(rng, 1, 4 * hidden, hidden, scale=0.1),
        "lstm.B": np.zeros((1, 8 * hidden), np.float32),
        "head.w": weights_of(rng, hidden, 1),
        "head.b": np.zeros(1, np.float32),
        "split": np.array([1, 1], np.int64),
    }
    nodes = [
        helper.make_node("Equal", ["sr", "c.16k"], ["is16k"]),
        helper.make_node(
            "If", ["is16k"], ["features"], then_branch=then_graph, else_branch=else_graph
        ),
        helper.make_node("Split", ["state", "split"], ["h0", "c0"], axis=0),
        helper.make_node(
            "LSTM",
            ["features", "lstm.W", "lstm.R", "lstm.B", "", "h0", "c0"],
            ["", "hn", "cn"],
            hidden_size=hidden,
        ),
        helper.make_node("Concat", ["hn", "cn"], ["stateN"], axis=0),
        helper.make_node("Squeeze", ["hn", "c.axis0"], ["last"]),
        helper.make_node("Gemm", ["last", "head.w", "head.b"], ["logit"]),
        helper.make_node("Sigmoid", ["logit"], ["output"]),
    ]
    graph = helper.make_graph(
        nodes,
        "vad",
        [
            helper.make_tensor_value_info("input", FLOAT, ["batch", "time"]),
            helper.make_tensor_value_info("state", FLOAT, [2, "batch", hidden]),
            helper.make_tensor_value_info("sr", INT64, []),
        ],
        [
            helper.make_tensor_value_info("output", FLOAT, ["batch", 1]),
            helper.make_tensor_value_info("stateN", FLOAT, [2, "batch", hidden]),
        ],
        initializer=tensors(w),
    )
    return save(model_of(graph, opset=16, ir_version=8), folder / "vad_stateful.onnx")


def _vad_branch(name: str, projection: np.ndarray, rng: np.random.Generator) -> onnx.GraphProto:
    """input [batch, time] -> frames of sr/125 samples [frames, batch, sr/125] -> |x| W."""
    frame = projection.shape[0]
    w = {
        f"{name}.frame_shape": np.array([0, -1, frame], np.int64),
        f"{name}.w": projection,
        f"{name}.b": (0.01 * rng.standard_normal(32)).astype(np.float32),
    }
    nodes = [  # the frame size comes from sr, as the exported model computes it
        helper.make_node("Div", ["sr", "c.frame_rate"], [f"{name}.frame"]),
        helper.make_node("Unsqueeze", [f"{name}.frame", "c.axis0"], [f"{name}.frame1"]),
        helper.make_node("Slice", [f"{name}.frame_shape", "c.axis0", "c.two"], [f"{name}.head"]),
        helper.make_node("Concat", [f"{name}.head", f"{name}.frame1"], [f"{name}.shape"], axis=0),
        helper.make_node("Reshape", ["input", f"{name}.shape"], [f"{name}.frames"]),
        helper.make_node("Abs", [f"{name}.frames"], [f"{name}.mag"]),
        helper.make_node("MatMul", [f"{name}.mag", f"{name}.w"], [f"{name}.proj"]),
        helper.make_node("Add", [f"{name}.proj", f"{name}.b"], [f"{name}.biased"]),
        helper.make_node("Transpose", [f"{name}.biased"], ["branch_out"], perm=[1, 0, 2]),
    ]
    w["c.two"] = np.array([2], np.int64)
    return helper.make_graph(
        nodes,
        name,
        [],
        [helper.make_tensor_value_info("branch_out", FLOAT, ["frames", "batch", 32])],
        initializer=tensors(w),
    )


def build_gru_loop_decoder(folder: Path) -> Path:
    """A greedy GRU decoder exported with a Loop: `memory` [batch, 64] and a 2-layer state
    `h0` [2, batch, 64] (layers first); the Loop runs 8 steps, each feeding the argmax token's
    embedding back; outputs `tokens` [batch, 8] int64 and `hN` [2, batch, 64]."""
    rng = rng_for(8)
    hidden, vocab, steps = 64, 50, 8
    w = {
        "trip": np.array(steps, np.int64),
        "cond": np.array(True),
        "split": np.array([1, 1], np.int64),
        "start": np.zeros(1, np.int64),
    }
    body = _decoder_step(rng, hidden, vocab)
    nodes = [
        helper.make_node("Split", ["h0", "split"], ["h0_l0", "h0_l1"], axis=0),
        helper.make_node("Shape", ["memory"], ["memory_shape"]),
        helper.make_node("Slice", ["memory_shape", "start", "one"], ["batch_dim"]),
        helper.make_node("Expand", ["start", "batch_dim"], ["token0"]),
        helper.make_node(
            "Loop",
            ["trip", "cond", "h0_l0", "h0_l1", "token0"],
            ["h_l0", "h_l1", "last_token", "steps_tokens"],
            body=body,
        ),
        helper.make_node("Concat", ["h_l0", "h_l1"], ["hN"], axis=0),
        helper.make_node("Transpose", ["steps_tokens"], ["tokens"], perm=[1, 0]),
    ]
    w["one"] = np.ones(1, np.int64)
    graph = helper.make_graph(
        nodes,
        "gru_decoder",
        [
            helper.make_tensor_value_info("memory", FLOAT, ["batch", hidden]),
            helper.make_tensor_value_info("h0", FLOAT, [2, "batch", hidden]),
        ],
        [
            helper.make_tensor_value_info("tokens", INT64, ["batch", steps]),
            helper.make_tensor_value_info("hN", FLOAT, [2, "batch", hidden]),
        ],
        initializer=tensors(w),
    )
    return save(model_of(graph, opset=15, ir_version=8), folder / "gru_loop_decoder.onnx")


def _decoder_step(rng: np.random.Generator, hidden: int, vocab: int) -> onnx.GraphProto:
    """Loop body: embed the last token, add the memory, two GRU layers, argmax a new token."""
    w = {
        "embed": weights_of(rng, vocab, hidden, scale=0.1),
        "gru0.W": weights_of(rng, 1, 3 * hidden, hidden, scale=0.1),
        "gru0.R": weights_of(rng, 1, 3 * hidden, hidden, scale=0.1),
        "gru1.W": weights_of(rng, 1, 3 * hidden, hidden, scale=0.1),
        "gru1.R": weights_of(rng, 1, 3 * hidden, hidden, scale=0.1),
        "out.w": weights_of(rng, hidden, vocab),
        "axis0": np.array([0], np.int64),
    }
    nodes = [
        helper.make_node("Gather", ["embed", "token_in"], ["embedded"]),
        helper.make_node("Add", ["embedded", "memory"], ["step_in"]),
        helper.make_node("Unsqueeze", ["step_in", "axis0"], ["seq1"]),
        helper.make_node(
            "GRU",
            ["seq1", "gru0.W", "gru0.R", "", "", "h_in_l0"],
            ["y0", "h_out_l0"],
            hidden_size=hidden,
            linear_before_reset=1,
        ),
        helper.make_node("Squeeze", ["y0", "axis0"], ["y0s"]),
        helper.make_node(
            "GRU",
            ["y0s", "gru1.W", "gru1.R", "", "", "h_in_l1"],
            ["y1", "h_out_l1"],
            hidden_size=hidden,
            linear_before_reset=1,
        ),
        helper.make_node("Squeeze", ["h_out_l1", "axis0"], ["top"]),
        helper.make_node("MatMul", ["top", "out.w"], ["logits"]),
        helper.make_node("ArgMax", ["logits"], ["token_out"], axis=-1, keepdims=0),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        helper.make_node("Identity", ["token_out"], ["scan_token"]),
    ]
    state = [hidden]
    return helper.make_graph(
        nodes,
        "decoder_step",
        [
            helper.make_tensor_value_info("i", INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_in_l0", FLOAT, [1, "batch", *state]),
            helper.make_tensor_value_info("h_in_l1", FLOAT, [1, "batch", *state]),
            helper.make_tensor_value_info("token_in", INT64, ["batch"]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_out_l0", FLOAT, [1, "batch", *state]),
            helper.make_tensor_value_info("h_out_l1", FLOAT, [1, "batch", *state]),
            helper.make_tensor_value_info("token_out", INT64, ["batch"]),
            helper.make_tensor_value_info("scan_token", INT64, ["batch"]),
        ],
        initializer=tensors(w),
    )
