"""Instances x max batch on this machine (`bench/batching.py --instances`, issue 31 item 3).

Per model (default: a slow CNN, the zoo's PP-OCRv4 recognizer, and a fast one, the zoo's
Paddle-style CNN), one profile with its instance counts (1, 2, 4, ... up to the cores, each
instance with its share of the threads, `serving_threads`), then a grid of settings: instances
in `instance_counts()` x max batch in (1, MAX_BATCH), timeout 0. The p99 budget is
BUDGET_TIMES x the batch-1 latency (at least BUDGET_FLOOR_MS). Per setting, the highest
Poisson rate that keeps the budget is searched on the real Pipeline: start at START x the
setting's served ceiling (the profile's, at that instance count's measured latencies), then up
x UP or down x DOWN after each run (down to 90 % of what was served where the sender or the
Pipeline fell behind) until one held and one failed, then halfway between them,
RATE_RUNS runs of `--cell-seconds` (at least MIN_REQUESTS
requests: a slow model's short run holds too few to read a p99 from). A run holds when its p99
is within the budget and it kept up: the load generator realised 90 % of the offered rate and
the Pipeline answered 90 % of what was realised. The throughput held is printed against the
batch-1, one-instance setting's, measured in the same run (ratio 1.00 = no gain), beside the
simulator's own pick for the budget (margin 0) as predicted.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from optistudio.core.batching.instances import instance_counts
from optistudio.core.batching.latency_profile import measure_latency_profile
from optistudio.core.batching.settings import BatchingSettings, serving_threads
from optistudio.core.batching.tuner import recommend
from optistudio.core.batching.verify import measure_load
from optistudio.core.data.model_inputs import ModelInputs
from optistudio.core.machine.contention import ContentionMonitor

MODELS = ("ppocr_rec", "paddle_cnn")
MAX_BATCH = {"ppocr_rec": 4, "paddle_cnn": 8}
BUDGET_TIMES = 5.0
BUDGET_FLOOR_MS = 2.0
RATE_RUNS = 4
MIN_REQUESTS = 150
START, UP, DOWN = 0.7, 1.15, 0.8


def run(args, zoo_models) -> dict:
    """Every model's grid (module docstring); the figures by model."""
    import tempfile

    wanted, models = zoo_models(args)
    wanted = wanted if args.models else list(MODELS)
    folder = Path(tempfile.mkdtemp(prefix="batching-instances-"))
    seconds = args.cell_seconds or 4.0
    print(
        f"instances x max batch: {wanted}, {os.cpu_count()} CPUs, instance counts "
        f"{instance_counts()} (threads each: "
        f"{[serving_threads(n) for n in instance_counts()]}), {seconds:g}-s runs"
    )
    started, report = time.time(), {}
    for name in wanted:
        entry = models[name]
        inputs = (
            entry.quick_inputs if args.quick and entry.quick_inputs else entry.inputs
        ).fields()
        path = entry.build(folder / name)
        report[name] = _model_grid(name, path, inputs, seconds, args)
    report["wall_seconds"] = round(time.time() - started)
    print(f"\n{report['wall_seconds']} s in all")
    return report


def _model_grid(name: str, path: Path, inputs: dict, seconds: float, args) -> dict:
    largest = MAX_BATCH.get(name, 8)
    profile = measure_latency_profile(
        path, max_batch_size=largest, target=args.target, min_runs=5,
        min_seconds=args.profile_seconds / 4, inputs=ModelInputs(**inputs),
    )  # fmt: skip
    budget = max(BUDGET_TIMES * profile.latency_ms(1), BUDGET_FLOOR_MS)
    slowdown = {
        row.instances: dict(zip(profile.batch_sizes, row.slowdown, strict=True))
        for row in profile.instance_latency
    }
    print(
        f"\n{name}: batch means {dict(zip(profile.batch_sizes, [round(m, 3) for m in profile.mean_ms], strict=True))} ms; "
        f"slowdown on N instances at once {slowdown}; p99 budget {budget:.1f} ms; during the "
        f"profile steal {profile.environment.get('steal_share')}, other processes' cores "
        f"{profile.environment.get('other_cores')}"
    )  # fmt: skip
    rows = []
    for instances in profile.instance_counts():
        for batch in sorted({1, largest}):
            settings = BatchingSettings(max_batch_size=batch, timeout_ms=0, instances=instances)
            rows.append(_held(path, inputs, profile, settings, budget, seconds, args))
    base = rows[0]["held_throughput"]
    for row in rows:
        row["ratio"] = row["held_throughput"] / base if base else None
        ratio = f"{row['ratio']:.2f}x" if row["ratio"] is not None else "(no baseline held)"
        held = (
            f"held {row['held_throughput']:8.1f} req/s (p99 {row['p99_ms']:.1f} ms)"
            if row["held_throughput"]
            else f"held no rate tried ({RATE_RUNS} runs)"
        )
        print(
            f"  {row['instances']} instance(s) x max batch {row['max_batch']:>2}: {held} = "
            f"{ratio} batch 1 on one instance; predicted {row['predicted']:.1f} req/s; "
            f"steal {row['steal']:.0%}",
            flush=True,
        )
    return {
        "budget_ms": budget,
        "slowdown": slowdown,
        "rows": rows,
        "profile": profile.model_dump(mode="json", exclude={"runs", "quantiles_ms"}),
    }


def _held(path, inputs, profile, settings, budget, seconds, args) -> dict:
    """The highest rate of RATE_RUNS real runs that kept the budget (module docstring)."""
    advice = recommend(
        profile, p99_budget_ms=budget, base=settings, max_batch_size=settings.max_batch_size,
        timeouts_ms=(0.0,), instances=[settings.instances], margin=0.0, requests=3000,
    )  # fmt: skip
    predicted = advice.candidates[-1].predicted.throughput
    count = settings.instances
    top = profile.ceiling(settings.max_batch_size, with_handoff=True, instances=count)[0]
    rate, held, failed, best, steal = START * top, 0.0, None, None, []
    for attempt in range(RATE_RUNS):
        with ContentionMonitor() as machine:
            run = measure_load(
                path, settings, rate=rate, seconds=max(seconds, MIN_REQUESTS / rate),
                target=args.target, seed=attempt, inputs=ModelInputs(**inputs),
            )  # fmt: skip
        steal.append(machine.report.steal_share or 0.0)
        result = run.result
        realised = result.realised_rate or rate
        kept_up = realised >= 0.9 * rate and result.throughput >= 0.9 * realised
        kept = kept_up and result.p99_ms <= budget
        if kept and (best is None or result.throughput > best.throughput):
            best = result
        held, failed = (max(held, rate), failed) if kept else (held, min(failed or rate, rate))
        if held and failed:
            rate = (held + failed) / 2
        elif kept:
            rate *= UP
        else:  # below what was served when the sender or the Pipeline fell behind
            rate = min(rate * DOWN, 0.9 * result.throughput) if not kept_up else rate * DOWN
    return {
        "instances": settings.instances,
        "max_batch": settings.max_batch_size,
        "predicted": predicted,
        "held_throughput": best.throughput if best else 0.0,
        "p99_ms": best.p99_ms if best else float("nan"),
        "steal": max(steal),
    }
