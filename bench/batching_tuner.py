"""Does "Find best settings" keep its promise when the pick is served for real?

The tuner recommends the setting a user deploys; what matters to them is whether its p99 stays
within their budget when measured. Each round profiles the model afresh (sizes interleaved,
`--profile-seconds` per size, as the Profile job does), then for each scenario asks the tuner
twice, trusting the profile exactly (margin 0) and with the default speed margin (the budget
must also hold with the model 10 % slower), serves each pick with the real Pipeline under the
load generator for `--seconds`, and prints predicted against measured p99 and whether the
budget held. Scenarios, with L = the profile's latency at max batch:
  - Poisson at 50 % of the ceiling, budget 2 L;
  - Poisson at 70 % of the ceiling, budget 3 L;
  - "max throughput" under a budget of 3 L (served at the rate the tuner says it sustains).
The baseline is the margin-0 pick, measured in the same run.

Model: all-MiniLM-L6-v2 (FP32, 32 tokens), ONNX Runtime CPU, one instance, `--threads`
intra-op threads (default: as the product serves, the cores but one), idle threads not spinning.

Run: .venv/bin/python bench/batching_tuner.py [--rounds 2] [--seconds 30] [--threads N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from batching import _model  # noqa: E402

from optistudio.core.backends.target import RunTarget  # noqa: E402
from optistudio.core.batching.latency_profile import measure_latency_profile  # noqa: E402
from optistudio.core.batching.settings import serving_threads  # noqa: E402
from optistudio.core.batching.trace import overall_slowdown  # noqa: E402
from optistudio.core.batching.tuner import DEFAULT_MARGIN, recommend  # noqa: E402
from optistudio.core.batching.verify import measure_load  # noqa: E402
from optistudio.core.data.model_inputs import ModelInputs  # noqa: E402

REQUEST = ModelInputs(
    shapes={name: [1, 32] for name in ("input_ids", "attention_mask", "token_type_ids")}
)
MAX_BATCH = 8
SCENARIOS = (("Poisson 50 %", 0.5, 2.0), ("Poisson 70 %", 0.7, 3.0), ("max throughput", None, 3.0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--profile-seconds", type=float, default=2.0)
    parser.add_argument("--threads", type=int)
    args = parser.parse_args()
    target = RunTarget(threads=args.threads, spin_wait=False)
    model = _model()
    started = time.time()
    threads = args.threads or f"default ({serving_threads()})"
    print(f"threads {threads}, {args.seconds:g}-s runs, max batch {MAX_BATCH}")
    print(
        f"{'round':<6}{'scenario':<16}{'budget':>8}{'margin':>8}{'pick':>12}{'rate':>7}"
        f"{'pred p99':>10}{'+margin':>9}{'meas p99':>10}{'held':>6}{'slow':>6}"
    )
    held: dict[float, list[bool]] = {0.0: [], DEFAULT_MARGIN: []}
    for round_ in range(args.rounds):
        profile = measure_latency_profile(
            model, max_batch_size=MAX_BATCH, inputs=REQUEST,
            min_seconds=args.profile_seconds, target=target,
        )  # fmt: skip
        ceiling = profile.ceiling(MAX_BATCH, with_handoff=True)[0]
        latency = profile.latency_ms(MAX_BATCH)
        for name, share, budget_factor in SCENARIOS:
            budget = round(budget_factor * latency)
            measured_picks: dict[tuple, tuple[float, float]] = {}
            for margin in held:
                rate = share * ceiling if share else None
                advice = recommend(
                    profile, p99_budget_ms=budget, rate=rate, max_batch_size=MAX_BATCH,
                    margin=margin,
                )  # fmt: skip
                served_rate = rate if rate is not None else advice.predicted.throughput
                key = (advice.settings.max_batch_size, advice.settings.timeout_ms, served_rate)
                if key not in measured_picks:  # the same pick at the same rate: measured once
                    run = measure_load(
                        model, advice.settings, rate=served_rate, seconds=args.seconds,
                        inputs=REQUEST, target=target,
                    )  # fmt: skip
                    measured_picks[key] = (
                        run.result.p99_ms,
                        overall_slowdown(run.batches, profile),
                    )
                p99, slow = measured_picks[key]
                ok = advice.feasible and p99 <= budget
                held[margin].append(ok)
                slower = "-" if advice.p99_slower_ms is None else f"{advice.p99_slower_ms:.1f}"
                pick = f"b{key[0]} t{key[1]:g}"
                print(
                    f"{round_:<6}{name:<16}{budget:>8}{margin:>8.0%}{pick:>12}{served_rate:>7.0f}"
                    f"{advice.predicted.p99_ms:>10.1f}{slower:>9}{p99:>10.1f}"
                    f"{'yes' if ok else 'NO':>6}{slow:>6.2f}",
                    flush=True,
                )
    for margin, oks in held.items():
        print(f"margin {margin:.0%}: the budget held in {sum(oks)} of {len(oks)} served picks")
    print(f"wall {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
