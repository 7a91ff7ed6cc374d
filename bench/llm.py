"""A small language model served faster: FP32 vs INT8 vs INT4 weights on ONNX Runtime and OpenVINO.

The model is the Llama that bench/llm_model.py trains on this Python's standard library and
exports with a KV cache (cached in ~/.cache/optistudio/llm/stdlib-llama; never committed). For
each variant, in one run and with the engine's own code (optistudio.core.llm):

- size on disk, and its ratio to FP32;
- TTFT (prefill of a 32 / 128 / 512-token prompt at batch 1, median of 3 a round);
- greedy decoding at batch 1 and 4 (64 steps after a 16-token prompt): tokens/s, ms per token
  p50 / p99;
- perplexity on held-out standard-library text (windows of 256 tokens), top-1 agreement and
  mean KL against ONNX Runtime FP32 on the same windows;

the timings in 5 interleaved rounds (every variant once per round, all sessions open, threads
not spinning between runs), each figure the median over rounds and each ratio the median of
the per-round ratios to FP32 (paired: a neighbour's load in one round falls on both sides);
then Auto's pick (fastest at batch 1 within a 5 % perplexity increase) and the CPU's flags.

Variants: int8_weight_only and int4_weight_only (MatMulNBits, RTN, block 32, accuracy_level 4,
embedding and LM head at 8 bits) on ONNX Runtime, and INT4 with block 128, computing in float
(accuracy_level 0) or symmetric (no zero points); int8_nncf and int4_nncf (nncf.compress_weights,
INT4 group 128, embedding and LM head at 8 bits) on OpenVINO; and where bench/llm_model.py
could run ONNX Runtime GenAI's model builder, its FP32 and INT4 exports of the same weights
(GroupQueryAttention; its INT4 quantizes the LM head to 4 bits and leaves the embedding in
float), and our int4_weight_only applied to its FP32 graph.

Run (the project's venv; only building the model needs torch, see bench/llm_model.py):
    .venv/bin/python bench/llm.py [--model DIR] [--threads 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("NNCF_CI", "1")

import numpy as np  # noqa: E402

from optistudio.core.backends.base import SessionOptions  # noqa: E402
from optistudio.core.llm import load_decoder_io, open_decoder, read_card  # noqa: E402
from optistudio.core.llm.card import size_on_disk  # noqa: E402
from optistudio.core.llm.choice import DecoderCandidate, fastest_within_budget  # noqa: E402
from optistudio.core.llm.decoder import DecoderIO  # noqa: E402
from optistudio.core.llm.openvino_weights import (  # noqa: E402
    NNCFWeightsConfig,
    compress_for_openvino,
)
from optistudio.core.llm.perplexity import agreement  # noqa: E402
from optistudio.core.llm.timing import time_decode, time_prefill  # noqa: E402
from optistudio.core.llm.weight_only import WeightOnlyConfig, quantize_weight_only  # noqa: E402
from optistudio.core.machine.environment import cpu_model, isa_flags  # noqa: E402
from optistudio.services.telemetry import opt_out_of_openvino  # noqa: E402

DEFAULT_MODEL = Path.home() / ".cache" / "optistudio" / "llm" / "stdlib-llama"
PROMPTS = (32, 128, 512)
BATCHES = (1, 4)
WINDOW = 256
DECODE_STEPS = 64
FLAGS_OF_INTEREST = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8", "amx_bf16")
ONNXRUNTIME_VARIANTS = {
    "int8_weight_only": WeightOnlyConfig(bits=8, block_size=32),
    "int4_weight_only": WeightOnlyConfig(bits=4, block_size=32),
    "int4_weight_only_block128": WeightOnlyConfig(bits=4, block_size=128),
    "int4_weight_only_fp32_compute": WeightOnlyConfig(bits=4, block_size=32, accuracy_level=0),
    "int4_weight_only_symmetric": WeightOnlyConfig(bits=4, block_size=32, symmetric=True),
}
"""The recipes' settings, and neighbours: larger blocks, MatMulNBits computing in float, no zero
points (symmetric: what GenAI's builder writes)."""
logger = logging.getLogger("bench.llm")


def build_variants(model: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, backend); quantized files are made once and kept beside the model."""
    folder = model.parent
    variants = {"fp32": (model, "onnxruntime"), "fp32@openvino": (model, "openvino")}
    for name, config in ONNXRUNTIME_VARIANTS.items():
        target = folder / name / "model.onnx"
        if not target.is_file():
            quantize_weight_only(model, target, config)
        variants[name] = (target, "onnxruntime")
    for name in ("genai_fp32", "genai_int4"):  # ONNX Runtime GenAI's builder, when it ran
        if (folder / name / "model.onnx").is_file():
            variants[name] = (folder / name / "model.onnx", "onnxruntime")
    if "genai_fp32" in variants:  # our recipe on the builder's FP32 graph
        target = folder / "genai_int4_weight_only" / "model.onnx"
        if not target.is_file():
            source = variants["genai_fp32"][0]
            quantize_weight_only(source, target, ONNXRUNTIME_VARIANTS["int4_weight_only"])
        variants["genai_int4_weight_only"] = (target, "onnxruntime")
    for name, mode in (("int8_nncf", "int8_asym"), ("int4_nncf", "int4_asym")):
        target = folder / name / "model.xml"
        if not target.is_file():
            compress_for_openvino(model, target, NNCFWeightsConfig(mode=mode, group_size=128))
        variants[f"{name}@openvino"] = (target, "openvino")
    return variants


def _io(path: Path, original: DecoderIO) -> DecoderIO | None:
    """An IR variant keeps its original's interface; an ONNX file is read for its own (a GenAI
    export takes no position_ids)."""
    return None if path.suffix == ".onnx" else original


def timing_round(session: Any, vocab: int) -> dict[str, Any]:
    """One round of every timing on one variant."""
    decode = {
        b: time_decode(session, vocab, batch=b, steps=DECODE_STEPS).model_dump() for b in BATCHES
    }
    return {
        "ttft_ms": {p: time_prefill(session, p, vocab, repeats=3).ttft_ms for p in PROMPTS},
        "tokens_per_s": {b: decode[b]["tokens_per_s"] for b in BATCHES},
        "ms_per_token_p50": decode[1]["ms_per_token_p50"],
        "ms_per_token_p99": decode[1]["ms_per_token_p99"],
    }


def interleaved(sessions: dict[str, Any], vocab: int, rounds: int) -> dict[str, list[dict]]:
    """Every variant timed once per round, in turn: a neighbour's load falls on all of them."""
    found: dict[str, list[dict]] = {name: [] for name in sessions}
    for index in range(rounds):
        logger.info("timing round %d of %d", index + 1, rounds)
        for name, session in sessions.items():
            found[name].append(timing_round(session, vocab))
    return found


def summarize(rounds: dict[str, list[dict]]) -> dict[str, dict[str, Any]]:
    """Per variant: the median over rounds of each figure, and of its ratio to FP32's figure in
    the same round (paired, so a slow round slows both sides)."""
    base = rounds["fp32"]
    summary = {}
    for name, found in rounds.items():

        def median(read: Any, found: list[dict] = found) -> float:
            return float(np.median([read(r) for r in found]))

        def paired(read: Any, found: list[dict] = found) -> float:
            return float(np.median([read(r) / read(b) for r, b in zip(found, base, strict=True)]))

        summary[name] = {
            "ttft_ms": {p: median(lambda r, p=p: r["ttft_ms"][p]) for p in PROMPTS},
            "ttft_ratio": {p: paired(lambda r, p=p: r["ttft_ms"][p]) for p in PROMPTS},
            "tokens_per_s": {b: median(lambda r, b=b: r["tokens_per_s"][b]) for b in BATCHES},
            "speedup": {b: paired(lambda r, b=b: r["tokens_per_s"][b]) for b in BATCHES},
            "ms_per_token_p50": median(lambda r: r["ms_per_token_p50"]),
            "ms_per_token_p99": median(lambda r: r["ms_per_token_p99"]),
            "rounds": found,
        }
    return summary


def table(rows: dict[str, dict[str, Any]]) -> str:
    head = (
        "| variant | size MB (x FP32) | TTFT ms 32 / 128 / 512 | tok/s b1 (x) | ms/token b1 "
        "p50 / p99 | tok/s b4 (x) | perplexity (increase) | top-1 agree | mean KL |"
    )
    lines = [head, "|" + " --- |" * 9]
    for name, r in rows.items():
        t, speed, up = r["text"], r["tokens_per_s"], r["speedup"]
        ttft = " / ".join(f"{r['ttft_ms'][p]:.1f}" for p in PROMPTS)
        lines.append(
            f"| {name} | {r['size_bytes'] / 1e6:.1f} ({r['size_ratio']:.2f}) | {ttft} | "
            f"{speed[1]:.1f} ({up[1]:.2f}) | "
            f"{r['ms_per_token_p50']:.2f} / {r['ms_per_token_p99']:.2f} | "
            f"{speed[4]:.1f} ({up[4]:.2f}) | "
            f"{t['perplexity']:.2f} ({t['perplexity_increase']:+.2%}) | "
            f"{t['top1_agreement']:.3f} | {t['mean_kl']:.4f} |"
        )
    return "\n".join(lines)


def main() -> int:
    opt_out_of_openvino()  # OpenVINO's telemetry reads no switch but its consent file
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=8192, help="evaluation tokens")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    parser.add_argument(
        "--only", help="comma-separated variants to run (fp32 always runs: the reference)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    model = args.model / "model.onnx"
    if not model.is_file():
        print(
            f"No model in {args.model}. Build it first (torch stays out of .venv):\n"
            "  python3 -m venv /tmp/llmvenv\n"
            "  /tmp/llmvenv/bin/pip install --find-links /opt/wheels torch==2.13.0 transformers "
            "tokenizers onnx\n"
            f"  /tmp/llmvenv/bin/python bench/llm_model.py --out {args.model}",
            file=sys.stderr,
        )
        return 2
    card = read_card(model)
    io = load_decoder_io(model)
    text = np.load(args.model / "eval_tokens.npy")[: args.tokens]
    vocab = card.vocab or 32
    started = time.perf_counter()
    variants = build_variants(model)
    if args.only:
        wanted = {"fp32", *args.only.split(",")}
        variants = {name: found for name, found in variants.items() if name in wanted}
    options = SessionOptions(threads=args.threads, spin_wait=False)  # 8 sessions, one process
    sessions = {
        name: open_decoder(path, backend=backend, io=_io(path, io), options=options)
        for name, (path, backend) in variants.items()
    }
    rows = summarize(interleaved(sessions, vocab, args.rounds))
    for name, (path, backend) in variants.items():
        logger.info("scoring %s on the text", name)
        rows[name]["backend"] = backend
        rows[name]["size_bytes"] = size_on_disk(path)
        rows[name]["size_ratio"] = size_on_disk(path) / size_on_disk(model)
        rows[name]["text"] = agreement(
            sessions["fp32"], sessions[name], text, window=WINDOW
        ).model_dump()
    candidates = [
        DecoderCandidate(
            name=name,
            tokens_per_s=row["tokens_per_s"][1],
            perplexity_increase=row["text"]["perplexity_increase"],
        )
        for name, row in rows.items()
    ]
    choice = fastest_within_budget(candidates, "fp32")
    flags = isa_flags()
    report = {
        "model": card.model_dump(exclude={"io"}),
        "cpu": cpu_model(),
        "cpu_flags": [f for f in FLAGS_OF_INTEREST if f in flags],
        "threads": args.threads,
        "eval_tokens": int(len(text)),
        "rounds": args.rounds,
        "variants": rows,
        "auto": choice.model_dump(),
        "seconds": round(time.perf_counter() - started, 1),
    }
    if args.json:
        print(json.dumps(report, default=str))
        return 0
    for row in rows.values():
        del row["rounds"]
    print(table(rows))
    print(json.dumps({k: v for k, v in report.items() if k != "variants"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
