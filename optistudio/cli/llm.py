"""`optistudio bench MODEL` when MODEL is a decoder with a KV cache: TTFT and decoding speed;
`optistudio llm serve-whatif MODEL --rate R`: serving it to requests arriving at R per second.

A decoder's speed is not one run's latency: the bench times the prefill at 32 / 128 / 512-token
prompts that fit its context (ttft_ms) and greedy decoding at each --batch (default 1 and 4: tokens/s, ms per token
p50 / p99), with the model's size and the environment (optistudio.core.llm.serving). `decoder_bench`
returns None for any other model, so the ordinary benchmark runs.

`optistudio llm convert CHECKPOINT --out DIR` turns a local Hugging Face checkpoint into a
decoder folder with ONNX Runtime GenAI's model builder, offline (optistudio.core.llm.convert).

serve-whatif times one decoding step at batch sizes 1, 2, 4, ... up to --max-batch and the
prefill of the prompt, then predicts serving Poisson arrivals at --rate of requests of
--prompt-tokens and --new-tokens with static or continuous batching (tokens/s, TTFT and time
per token p50 / p99, whether the queue keeps growing, the continuous ceiling), and with
--verify N serves N such requests for real beside it (optistudio.core.llm.serving_whatif).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from optistudio.cli.args import validated
from optistudio.cli.output import print_json

if TYPE_CHECKING:  # the engine is imported when a command runs: `optistudio` starts fast
    from optistudio.core.llm.batched_serving import ServingFigures
    from optistudio.core.llm.serving import DecoderBenchReport
    from optistudio.core.llm.serving_whatif import DecoderServingReport


def decoder_bench(args: argparse.Namespace) -> int | None:
    """Bench `args.model` as a decoder and print the report; None when it is not a decoder."""
    from optistudio.core.backends.base import SessionOptions
    from optistudio.core.llm.card import read_card
    from optistudio.core.llm.folder import decoder_path, is_decoder_file
    from optistudio.core.llm.serving import benchmark_decoder, settings_for

    # a folder: the graph it holds (a checkpoint without one is told how to convert it)
    path = decoder_path(Path(args.model))
    if not is_decoder_file(path):
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
    memory = f", peak RSS {report.peak_rss_mb:.0f} MiB" if report.peak_rss_mb is not None else ""
    lines = [
        f"{name} on {report.backend} ({threads} threads), {report.size_bytes / 1e6:.1f} MB{memory}"
    ]
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


def add_llm_parser(commands: Any) -> None:
    llm = commands.add_parser("llm", help="small language models: serving a decoder")
    actions = llm.add_subparsers(dest="llm_action", required=True)
    whatif = actions.add_parser(
        "serve-whatif",
        help="predict tokens/s and time per token p99 at an arrival rate (static or continuous "
        "batching of decode steps), from the decoder's measured step and prefill times",
    )
    add = whatif.add_argument
    add("model", type=Path, help="a decoder .onnx file (with its KV cache), or its folder")
    add("--backend", default="onnxruntime")
    add("--threads", type=int, help="intra-op threads (default: runtime's)")
    add("--rate", type=float, required=True, help="requests per second arriving (Poisson)")
    add("--prompt-tokens", type=int, default=32, help="prompt tokens of each request")
    add("--new-tokens", type=int, default=64, help="tokens each request wants")
    add("--batching", choices=("continuous", "static"), default="continuous")
    add("--max-batch", type=int, default=4, help="most sequences in one decoding step")
    add("--timeout-ms", type=float, default=0.0, help="static: wait for a full batch this long")
    add("--requests", type=int, default=500, help="requests simulated")
    add("--steps", type=int, default=32, help="timed steps per batch size")
    add("--verify", type=int, default=0, metavar="N", help="also serve N requests for real")
    add("--json", action="store_true", help="print one JSON object")
    convert = actions.add_parser(
        "convert",
        help="convert a local Hugging Face checkpoint (Llama, Qwen2, Phi-3, ...) into a decoder "
        "folder with ONNX Runtime GenAI's model builder, offline",
    )
    convert.add_argument("checkpoint", type=Path, help="the folder save_pretrained wrote")
    convert.add_argument("--out", type=Path, required=True, help="the decoder folder to write")
    convert.add_argument("--precision", choices=("fp32", "int4"), default="fp32")
    convert.add_argument("--json", action="store_true", help="print one JSON object")


def command_llm(args: argparse.Namespace) -> int:
    """`optistudio llm serve-whatif`: profile, predict (and verify); print the report.
    `optistudio llm convert`: a checkpoint into a decoder folder, and its card."""
    if args.llm_action == "convert":
        return command_convert(args)
    from optistudio.core.backends.base import SessionOptions
    from optistudio.core.llm.batched_serving import ServingPolicy
    from optistudio.core.llm.serving_whatif import ServeWhatIfSettings, decoder_serving_report

    policy = validated(
        ServingPolicy,
        {"batching": args.batching, "max_batch": args.max_batch, "timeout_ms": args.timeout_ms},
        "serving",
    )
    fields = {
        "rate": args.rate,
        "prompt_tokens": args.prompt_tokens,
        "new_tokens": args.new_tokens,
        "policy": policy,
        "requests": args.requests,
        "steps": args.steps,
        "verify_requests": args.verify,
    }
    settings = validated(ServeWhatIfSettings, fields, "serve-whatif")
    from optistudio.core.llm.folder import decoder_path

    report = decoder_serving_report(
        decoder_path(args.model),
        settings,
        backend=args.backend,
        options=SessionOptions(threads=args.threads),
    )
    if args.json:
        print_json(report.model_dump(mode="json", exclude={"profile": {"step_runs_ms"}}))
    else:
        print(serving_table(report, args.model.name))
    return 0


def command_convert(args: argparse.Namespace) -> int:
    from optistudio.core.llm.card import read_card
    from optistudio.core.llm.convert import checkpoint_architecture, convert_checkpoint
    from optistudio.core.llm.folder import decoder_path

    architecture = checkpoint_architecture(args.checkpoint)
    out = convert_checkpoint(args.checkpoint, args.out, precision=args.precision)
    card = read_card(decoder_path(out))
    payload = {
        "checkpoint": str(args.checkpoint), "architecture": architecture, "out": str(out),
        "model": str(decoder_path(out)), "precision": args.precision,
        "layers": card.layers, "heads": card.heads, "kv_heads": card.kv_heads,
        "vocab": card.vocab, "context_length": card.context_length,
        "kv_bytes_per_token": card.kv_bytes_per_token, "size_bytes": card.size_bytes,
    }  # fmt: skip
    if args.json:
        print_json(payload)
        return 0
    print(
        f"Converted {args.checkpoint.name} ({architecture}) to {out} at {args.precision}: "
        f"{card.layers} layers, {card.heads} heads / {card.kv_heads} KV heads, vocabulary "
        f"{card.vocab}, context {card.context_length}, {card.size_bytes / 1e6:.1f} MB. "
        f"Next: optistudio bench {out}"
    )
    return 0


def serving_table(report: DecoderServingReport, name: str) -> str:
    """The what-if for a person, each figure naming what it was measured or predicted on."""
    threads = report.environment.get("threads") or "runtime default"
    whatif = report.whatif
    policy = whatif.policy
    lines = [f"{name} on {report.backend} ({threads} threads)"]
    lines += [
        f"  step, batch {d.batch} after {d.prompt_tokens} tokens: {d.tokens_per_s:.1f} tokens/s, "
        f"{d.ms_per_token_p50:.2f} / {d.ms_per_token_p99:.2f} ms per token p50 / p99"
        for d in report.decode
    ]
    lines.append(
        f"  {whatif.rate:g} requests/s of {whatif.prompt_tokens} + {whatif.new_tokens} tokens, "
        f"{policy.batching} batching up to {policy.max_batch}: asks {whatif.offered_tokens_per_s:.1f}"
        f" tokens/s; continuous ceiling {whatif.ceiling_tokens_per_s:.1f} tokens/s"
    )
    lines.append(_figures_line(f"predicted ({whatif.requests} requests)", whatif.predicted))
    if report.verified is not None:
        served = report.verified
        lines.append(
            _figures_line(f"served ({served.measured.requests} requests)", served.measured)
        )
        lines.append(_figures_line("predicted for those arrivals", served.predicted))
    return "\n".join(lines)


def _figures_line(label: str, figures: ServingFigures) -> str:
    flag = ", SATURATED (the queue kept growing)" if figures.saturated else ""
    return (
        f"  {label}: {figures.tokens_per_s:.1f} tokens/s, TTFT p50 / p99 "
        f"{figures.ttft_p50_ms:.2f} / {figures.ttft_p99_ms:.2f} ms, time per token p50 / p99 "
        f"{figures.tpot_p50_ms:.2f} / {figures.tpot_p99_ms:.2f} ms, mean batch "
        f"{figures.mean_batch:.2f}{flag}"
    )
