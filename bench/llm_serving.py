"""Serving a small language model: batching decode steps, predicted and then served for real.

The model is bench/llm_model.py's Llama (cached in ~/.cache/optistudio/llm/stdlib-llama). One
session on ONNX Runtime; the decode profile the Batching page and `optistudio llm serve-whatif`
predict from (`measure_decode_profile`: a step per live batch size, a prefill per prompt
length); then, for each arrival rate (a share of the continuous ceiling at --max-batch), the
same Poisson trace of --requests requests served three ways with the engine's own serving loop
(optistudio.core.llm.batched_serving.serve, wall clock):

- one at a time (max batch 1: the anchor, no batching);
- static batching (a batch decodes to its end before the next is formed, --timeout-ms);
- continuous batching (a finished sequence's place refilled at the next step);

and each predicted for those very arrivals (`predict_serving`: the loop on a simulated clock at
the profile's costs). Printed per run: tokens/s, TTFT p50 / p99 and time per token p50 / p99,
measured and predicted with their ratio, and each policy's tokens/s and TTFT p99 against one
at a time measured in the same run. The three runs of a rate go in a rotated order (rate i
starts with policy i mod 3) so a slow spell does not always fall on the same one.

Run (the project's venv):
    .venv/bin/python bench/llm_serving.py [--model DIR] [--threads 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("NNCF_CI", "1")

from optistudio.core.backends.base import SessionOptions  # noqa: E402
from optistudio.core.llm import open_decoder, read_card  # noqa: E402
from optistudio.core.llm.batched_serving import (  # noqa: E402
    ServingFigures,
    ServingPolicy,
    arrival_trace,
    serve,
    serving_figures,
)
from optistudio.core.llm.folder import decoder_path  # noqa: E402
from optistudio.core.llm.serving_whatif import (  # noqa: E402
    continuous_ceiling,
    measure_decode_profile,
    predict_serving,
)
from optistudio.core.machine.environment import cpu_model, isa_flags  # noqa: E402
from optistudio.services.telemetry import opt_out_of_openvino  # noqa: E402

DEFAULT_MODEL = Path.home() / ".cache" / "optistudio" / "llm" / "stdlib-llama"
FIGURES = ("tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms")


def main() -> int:
    opt_out_of_openvino()  # OpenVINO's telemetry reads no switch but its consent file
    args = parse_args()
    path = decoder_path(args.model)
    if not path.is_file():
        print(f"No model at {args.model}: build it with bench/llm_model.py first.", file=sys.stderr)
        return 2
    card = read_card(path)
    vocab = card.vocab or 2
    session = open_decoder(
        path, backend="onnxruntime", options=SessionOptions(threads=args.threads), io=card.io
    )
    started = time.perf_counter()
    try:
        sizes = [b for b in (1, 2, 4, 8, 16) if b < args.max_batch] + [args.max_batch]
        profile = measure_decode_profile(
            session,
            vocab=vocab,
            batch_sizes=sizes,
            prompt_lengths=sorted({max(1, args.prompt // 4), args.prompt}),
            steps=32,
            context=args.prompt,
            backend="onnxruntime",
            threads=args.threads,
        )
        ceiling = continuous_ceiling(profile, args.max_batch, args.prompt, args.new)
        policies = {
            "one at a time": ServingPolicy(batching="continuous", max_batch=1),
            "static": ServingPolicy(
                batching="static", max_batch=args.max_batch, timeout_ms=args.timeout_ms
            ),
            "continuous": ServingPolicy(batching="continuous", max_batch=args.max_batch),
        }
        runs = []
        for i, share in enumerate(args.shares):
            rate = share * ceiling / args.new
            trace = arrival_trace(
                rate=rate, count=args.requests, prompt_tokens=args.prompt,
                new_tokens=args.new, seed=i,
            )  # fmt: skip
            names = list(policies)
            order = names[i % 3 :] + names[: i % 3]
            served = {
                name: serving_figures(serve(session, trace, policies[name], vocab=vocab))
                for name in order
            }
            predicted = {name: predict_serving(profile, trace, policies[name]) for name in names}
            runs.append(_run(share, rate, served, predicted))
    finally:
        session.close()
    report = {
        "model": str(path),
        "card": {"layers": card.layers, "parameters": card.parameters.total},
        "cpu": cpu_model(),
        "isa_flags": isa_flags(),
        "threads": args.threads,
        "prompt_tokens": args.prompt,
        "new_tokens": args.new,
        "max_batch": args.max_batch,
        "requests": args.requests,
        "profile_step_ms": dict(zip(profile.batch_sizes, profile.step_ms, strict=True)),
        "continuous_ceiling_tokens_per_s": ceiling,
        "runs": runs,
        "seconds": round(time.perf_counter() - started, 1),
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report)
    return 0


def _run(
    share: float,
    rate: float,
    served: dict[str, ServingFigures],
    predicted: dict[str, ServingFigures],
) -> dict[str, Any]:
    anchor = served["one at a time"]
    policies = {}
    for name, measured in served.items():
        guess = predicted[name]
        policies[name] = {
            "measured": {f: getattr(measured, f) for f in FIGURES},
            "predicted": {f: getattr(guess, f) for f in FIGURES},
            "predicted_vs_measured": {
                f: getattr(guess, f) / getattr(measured, f) if getattr(measured, f) else None
                for f in FIGURES
            },
            "mean_batch": measured.mean_batch,
            "saturated": {"measured": measured.saturated, "predicted": guess.saturated},
            "tokens_per_s_vs_one_at_a_time": measured.tokens_per_s / anchor.tokens_per_s,
            "ttft_p99_vs_one_at_a_time": measured.ttft_p99_ms / anchor.ttft_p99_ms,
        }
    return {"share_of_ceiling": share, "rate": rate, "policies": policies}


def _print(report: dict[str, Any]) -> None:
    print(f"{report['cpu']} · {report['threads']} threads · flags {' '.join(report['isa_flags'])}")
    steps = ", ".join(f"b{b} {ms:.2f} ms" for b, ms in report["profile_step_ms"].items())
    print(f"decode step: {steps}; continuous ceiling {report['continuous_ceiling_tokens_per_s']:.1f}"
          f" tokens/s at batch {report['max_batch']}")  # fmt: skip
    print(f"{report['requests']} requests of {report['prompt_tokens']} + {report['new_tokens']} "
          "tokens per rate; measured (predicted, predicted/measured)")  # fmt: skip
    for run in report["runs"]:
        print(f"\nrate {run['rate']:.2f} req/s ({run['share_of_ceiling']:.0%} of the ceiling)")
        for name, p in run["policies"].items():
            m, g, r = p["measured"], p["predicted"], p["predicted_vs_measured"]
            cells = [f"{f} {m[f]:.1f} ({g[f]:.1f}, {r[f]:.2f}x)" for f in FIGURES]
            print(f"  {name:13} {' | '.join(cells)} | batch {p['mean_batch']:.2f} | "
                  f"tokens/s {p['tokens_per_s_vs_one_at_a_time']:.2f}x, TTFT p99 "
                  f"{p['ttft_p99_vs_one_at_a_time']:.2f}x one at a time")  # fmt: skip
    print(f"\n{report['seconds']} s")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens per request")
    parser.add_argument("--new", type=int, default=32, help="new tokens per request")
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--timeout-ms", type=float, default=50.0, help="static batching's wait")
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument(
        "--shares", type=lambda s: [float(x) for x in s.split(",")], default=[0.3, 0.7],
        help="arrival rates as shares of the continuous ceiling",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true")
    return parser.parse_args()


if __name__ == "__main__":
    sys.exit(main())
