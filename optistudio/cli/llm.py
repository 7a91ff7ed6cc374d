"""`optistudio bench MODEL` when MODEL is a decoder with a KV cache: TTFT and decoding speed.

A decoder's speed is not one run's latency: the bench times the prefill at 32 / 128 / 512-token
prompts that fit its context (ttft_ms) and greedy decoding at each --batch (default 1 and 4: tokens/s, ms per token
p50 / p99), with the model's size and the environment (optistudio.core.llm.serving). `decoder_bench`
returns None for any other model, so the ordinary benchmark runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import onnx

from optistudio.cli.output import print_json
from optistudio.core.backends.base import SessionOptions
from optistudio.core.llm.card import read_card
from optistudio.core.llm.decoder import is_decoder
from optistudio.core.llm.serving import DecoderBenchReport, benchmark_decoder, settings_for


def decoder_bench(args: argparse.Namespace) -> int | None:
    """Bench `args.model` as a decoder and print the report; None when it is not a decoder."""
    path = Path(args.model)
    if path.suffix != ".onnx" or not path.is_file():
        return None
    try:
        graph = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 - not readable as ONNX: the ordinary intake says why
        return None
    if not is_decoder(graph):
        return None
    card = read_card(path)
    options = SessionOptions(threads=args.threads, device=getattr(args, "device", "cpu"))
    report = benchmark_decoder(
        path,
        backend=args.backend or "onnxruntime",
        settings=settings_for(card, batches=args.batch),
        options=options,
        card=card,
    )
    if args.json:
        print_json(report.model_dump(mode="json"))
    else:
        print(table(report, path.name))
    return 0


def table(report: DecoderBenchReport, name: str) -> str:
    """The report for a person: one line per figure, each naming what it was measured on."""
    threads = report.environment.get("threads") or "runtime default"
    lines = [f"{name} on {report.backend} ({threads} threads), {report.size_bytes / 1e6:.1f} MB"]
    lines += [
        f"  TTFT, {p.prompt_tokens}-token prompt, batch 1: {p.ttft_ms:.2f} ms"
        for p in report.prefill
    ]
    lines += [
        f"  decoding, batch {d.batch}, {d.steps} steps after {d.prompt_tokens} tokens: "
        f"{d.tokens_per_s:.1f} tokens/s, {d.ms_per_token_p50:.2f} / {d.ms_per_token_p99:.2f} ms "
        "per token p50 / p99"
        for d in report.decode
    ]
    return "\n".join(lines)
