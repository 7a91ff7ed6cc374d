"""A small Llama trained here, for bench/llm.py: tokenizer, training and ONNX export with a KV cache.

Nothing is downloaded: the text is this Python's own standard library sources (every `.py`
file under `sysconfig.get_paths()["stdlib"]`; files whose path hashes to 0 mod 10 are held out
for evaluation), the tokenizer a byte-level BPE trained on it (`tokenizers`), the model a
`transformers` LlamaForCausalLM made from a config (RMSNorm, rotary positions, SwiGLU MLP,
grouped-query attention) and trained for a fixed number of seconds on CPU.

The export wraps the trained weights in the same Llama math written with an explicit cache, so
the graph has Optimum's / ONNX Runtime GenAI's interface (input_ids, attention_mask,
position_ids, past_key_values.N.key/value -> logits, present.N.key/value, caches [batch,
kv_heads, sequence, head_dim]); the script checks that its logits equal the transformers
model's, with and without the cache, before it writes anything.

It needs torch and transformers, which stay out of the project's .venv:

    python3 -m venv /tmp/llmvenv
    /tmp/llmvenv/bin/pip install --find-links /opt/wheels torch==2.13.0 transformers tokenizers onnx
    /tmp/llmvenv/bin/python bench/llm_model.py [--seconds 240] [--out ~/.cache/optistudio/llm/stdlib-llama]

Writes into --out: model.onnx, config.json, tokenizer.json, eval_tokens.npy (held-out ids),
train.json (loss curve, seconds, tokens seen), and with onnxruntime-genai installed
(`pip install onnxruntime-genai`) the same weights through its model builder in genai_fp32/ and
genai_int4/ (`--genai-only` builds just those). Never committed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import sysconfig
import time
import zlib
from pathlib import Path

for _key, _value in {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    os.environ[_key] = _value

import numpy as np  # noqa: E402

DEFAULT_OUT = Path.home() / ".cache" / "optistudio" / "llm" / "stdlib-llama"
SHAPE = {
    "vocab_size": 4096,
    "hidden_size": 512,
    "intermediate_size": 1408,
    "num_hidden_layers": 6,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "max_position_embeddings": 1024,
}


def corpus() -> tuple[list[str], list[str]]:
    """(training texts, held-out texts): the standard library's .py files, by path hash."""
    root = Path(sysconfig.get_paths()["stdlib"])
    train, held_out = [], []
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts or "test" in path.parts or "tests" in path.parts:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        key = zlib.crc32(str(path.relative_to(root)).encode())
        (held_out if key % 10 == 0 else train).append(text)
    return train, held_out


def train_tokenizer(texts: list[str], vocab: int):  # noqa: ANN201 - tokenizers' type
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def token_stream(tokenizer, texts: list[str]) -> np.ndarray:  # noqa: ANN001
    eos = tokenizer.token_to_id("</s>")
    ids: list[int] = []
    for encoding in tokenizer.encode_batch(texts):
        ids += encoding.ids + [eos]
    return np.array(ids, dtype=np.int64)


def train(model, ids: np.ndarray, *, seconds: float, seq: int, batch: int) -> dict:  # noqa: ANN001
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, betas=(0.9, 0.95))
    rng = np.random.default_rng(0)
    losses, step, start = [], 0, time.perf_counter()
    model.train()
    while time.perf_counter() - start < seconds:
        lr = 1.5e-3 * min(1.0, (step + 1) / 30)
        for group in optimizer.param_groups:
            group["lr"] = lr
        starts = rng.integers(0, len(ids) - seq - 1, size=batch)
        chunk = torch.from_numpy(np.stack([ids[s : s + seq + 1] for s in starts]))
        loss = model(input_ids=chunk[:, :-1], labels=chunk[:, :-1]).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(float(loss))
        step += 1
        if step % 20 == 0:
            print(f"step {step} loss {np.mean(losses[-20:]):.3f}", file=sys.stderr, flush=True)
    model.eval()
    return {
        "steps": step,
        "seconds": round(time.perf_counter() - start, 1),
        "tokens_seen": step * batch * seq,
        "loss_first_20": float(np.mean(losses[:20])),
        "loss_last_20": float(np.mean(losses[-20:])),
    }


def cached_llama(model):  # noqa: ANN001, ANN201
    """The trained Llama's math with the cache as plain inputs and outputs (exportable)."""
    import torch

    config = model.config
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = config.hidden_size // heads
    inner = model.model

    def rms(x, weight):  # noqa: ANN001, ANN202
        variance = x.pow(2).mean(-1, keepdim=True)
        return weight * (x * torch.rsqrt(variance + config.rms_norm_eps))

    def rotate(x, cos, sin):  # noqa: ANN001, ANN202
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    class Cached(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.llama = model.requires_grad_(False)  # a submodule: its weights trace as such
            theta = getattr(config, "rope_theta", None) or config.rope_parameters["rope_theta"]
            inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
            self.register_buffer("inv_freq", inv, persistent=False)

        def forward(self, input_ids, attention_mask, position_ids, *past):  # noqa: ANN001, ANN202
            x = inner.embed_tokens(input_ids)
            freqs = position_ids[..., None].float() * self.inv_freq
            emb = torch.cat([freqs, freqs], dim=-1)
            cos, sin = emb.cos()[:, None], emb.sin()[:, None]
            new, total = input_ids.shape[1], attention_mask.shape[1]
            queries = torch.arange(new) + (total - new)
            causal = torch.arange(total)[None, :] <= queries[:, None]
            allowed = causal[None, None] & attention_mask[:, None, None, :].bool()
            bias = torch.where(allowed, 0.0, torch.finfo(torch.float32).min)
            presents = []
            for i, layer in enumerate(inner.layers):
                attn = layer.self_attn
                h = rms(x, layer.input_layernorm.weight)
                b = h.shape[0]
                q = attn.q_proj(h).view(b, new, heads, head_dim).transpose(1, 2)
                k = attn.k_proj(h).view(b, new, kv_heads, head_dim).transpose(1, 2)
                v = attn.v_proj(h).view(b, new, kv_heads, head_dim).transpose(1, 2)
                q, k = rotate(q, cos, sin), rotate(k, cos, sin)
                k = torch.cat([past[2 * i], k], dim=2)
                v = torch.cat([past[2 * i + 1], v], dim=2)
                presents += [k, v]
                group = heads // kv_heads
                kk = k.repeat_interleave(group, dim=1)
                vv = v.repeat_interleave(group, dim=1)
                scores = q @ kk.transpose(-1, -2) / head_dim**0.5 + bias
                out = (scores.softmax(-1) @ vv).transpose(1, 2).reshape(b, new, -1)
                x = x + attn.o_proj(out)
                h = rms(x, layer.post_attention_layernorm.weight)
                mlp = layer.mlp
                x = x + mlp.down_proj(torch.nn.functional.silu(mlp.gate_proj(h)) * mlp.up_proj(h))
            logits = model.lm_head(rms(x, inner.norm.weight))
            return (logits, *presents)

    return Cached().eval()


def check_and_export(model, out: Path) -> dict:  # noqa: ANN001
    import torch

    config = model.config
    layers, kv_heads = config.num_hidden_layers, config.num_key_value_heads
    head_dim = config.hidden_size // config.num_attention_heads
    cached = cached_llama(model)
    ids = torch.randint(4, config.vocab_size, (2, 12))
    with torch.no_grad():
        reference = model(input_ids=ids).logits
        empty = [torch.zeros(2, kv_heads, 0, head_dim) for _ in range(2 * layers)]
        positions = torch.arange(12)[None].expand(2, 12)
        full = cached(ids, torch.ones(2, 12, dtype=torch.int64), positions, *empty)
        first = cached(ids[:, :8], torch.ones(2, 8, dtype=torch.int64), positions[:, :8], *empty)
        second = cached(
            ids[:, 8:], torch.ones(2, 12, dtype=torch.int64), positions[:, 8:], *first[1:]
        )
    checks = {
        "no_cache_max_abs": float((full[0] - reference).abs().max()),
        "with_cache_max_abs": float((second[0] - reference[:, 8:]).abs().max()),
    }
    if max(checks.values()) > 1e-3:
        raise SystemExit(f"the cached export math differs from transformers: {checks}")
    names = [f"past_key_values.{i}.{part}" for i in range(layers) for part in ("key", "value")]
    outputs = [f"present.{i}.{part}" for i in range(layers) for part in ("key", "value")]
    axes = {"input_ids": {0: "batch_size", 1: "sequence_length"}}
    axes["attention_mask"] = {0: "batch_size", 1: "total_sequence_length"}
    axes["position_ids"] = {0: "batch_size", 1: "sequence_length"}
    axes["logits"] = {0: "batch_size", 1: "sequence_length"}
    axes |= {name: {0: "batch_size", 2: "past_sequence_length"} for name in names}
    axes |= {name: {0: "batch_size", 2: "total_sequence_length"} for name in outputs}
    with torch.no_grad():
        torch.onnx.export(
            cached,
            (ids[:, 8:], torch.ones(2, 12, dtype=torch.int64), positions[:, 8:], *first[1:]),
            str(out / "model.onnx"),
            input_names=["input_ids", "attention_mask", "position_ids", *names],
            output_names=["logits", *outputs],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )
    return checks


def genai_builds(out: Path) -> dict[str, str]:
    """The same trained model through ONNX Runtime GenAI's model builder (FP32 and its INT4),
    into out/genai_fp32 and out/genai_int4, when onnxruntime-genai is installed: a second
    exporter's layout (GroupQueryAttention, rotary caches) for the bench to read and compare."""
    import importlib.util
    import shutil
    import subprocess

    if importlib.util.find_spec("onnxruntime_genai") is None:
        return {"genai": "onnxruntime-genai is not installed: skipped"}
    shutil.copyfile(out / "tokenizer.json", out / "hf" / "tokenizer.json")
    built = {}
    for precision in ("fp32", "int4"):
        target = out / f"genai_{precision}"
        command = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-m", str(out / "hf")]
        command += ["-i", str(out / "hf"), "-o", str(target), "-p", precision, "-e", "cpu"]
        command += ["-c", str(out / "genai_cache")]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        built[target.name] = "built" if done.returncode == 0 else done.stderr[-400:]
    shutil.rmtree(out / "genai_cache", ignore_errors=True)
    return built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--seconds", type=float, default=240)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--genai-only", action="store_true", help="only (re)build the GenAI exports of --out"
    )
    args = parser.parse_args()
    if args.genai_only:
        print(json.dumps(genai_builds(args.out)))
        return
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    train_texts, held_out = corpus()
    tokenizer = train_tokenizer(train_texts, SHAPE["vocab_size"])
    tokenizer.save(str(args.out / "tokenizer.json"))
    ids = token_stream(tokenizer, train_texts)
    eval_ids = token_stream(tokenizer, held_out)[:32768]
    np.save(args.out / "eval_tokens.npy", eval_ids)
    config = LlamaConfig(**SHAPE, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    model = LlamaForCausalLM(config)
    params = sum(p.numel() for p in model.parameters())
    print(f"{params / 1e6:.1f} M parameters, {len(ids)} training tokens", file=sys.stderr)
    record = train(model, ids, seconds=args.seconds, seq=128, batch=8)
    record |= {"parameters": params, "training_tokens": int(len(ids)), "eval_tokens": len(eval_ids)}
    model.save_pretrained(args.out / "hf")
    record["export_checks"] = check_and_export(model, args.out)
    record["genai"] = genai_builds(args.out)
    (args.out / "config.json").write_text(json.dumps(config.to_dict(), indent=1, default=str))
    (args.out / "train.json").write_text(json.dumps(record, indent=1))
    print(json.dumps(record))


if __name__ == "__main__":
    main()
