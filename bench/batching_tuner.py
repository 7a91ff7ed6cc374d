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
The baseline is the margin-0 pick, measured in the same run. A pick the tuner calls infeasible
(no setting meets the budget, and it says so) promises nothing and is not counted as held
("none"); the closest setting it names is still served, and the summary counts the refusals that
measurement bore out (its p99 passed the budget too).

Model: all-MiniLM-L6-v2 (FP32, 32 tokens), ONNX Runtime CPU, one instance, `--threads`
intra-op threads (default: as the product serves, the cores but one), idle threads not spinning.
With `--zoo`, instead, the verify zoo's batchable models (`bench/batching.py`'s ZOO_MODELS, or
`--models`), each at the request shape its package feeds, and only the default margin (the pick
users get): issue 44's "recommend's pick keeps its budget when served" across models. There L
is the larger of the latency at max batch and the simulated p99 of one request at a time at 10 %
of the ceiling: a fast model's batch of 8 takes less than serving one request costs.

Run: .venv/bin/python bench/batching_tuner.py [--rounds 2] [--seconds 30] [--threads N]
     .venv/bin/python bench/batching_tuner.py --zoo [--models a,b] [--rounds 1] [--seconds 8]
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
from optistudio.core.batching.settings import BatchingSettings, serving_threads  # noqa: E402
from optistudio.core.batching.simulate import simulate  # noqa: E402
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
    parser.add_argument("--zoo", action="store_true", help="the verify zoo's models (docstring)")
    parser.add_argument("--models", help="with --zoo: zoo models, comma-separated")
    parser.add_argument(
        "--instances", help="instance counts the tuner may pick, comma-separated (default: its own)"
    )
    args = parser.parse_args()
    target = RunTarget(threads=args.threads, spin_wait=False)
    started = time.time()
    threads = args.threads or f"default ({serving_threads()})"
    print(f"threads {threads}, {args.seconds:g}-s runs, max batch {MAX_BATCH}")
    print(
        f"{'model':<15}{'round':<6}{'scenario':<16}{'budget':>8}{'margin':>8}{'pick':>12}"
        f"{'rate':>7}{'pred p99':>10}{'+margin':>9}{'meas p99':>10}{'held':>6}{'slow':>6}"
    )
    held: dict[float, list[tuple[bool, bool, bool]]] = (
        {DEFAULT_MARGIN: []} if args.zoo else {0.0: [], DEFAULT_MARGIN: []}
    )
    for name, model, inputs in _models(args):
        _rounds(name, model, inputs, args, target, held)
    for margin, rows in held.items():
        oks = [(ok, calm) for ok, calm, feasible in rows if feasible]
        refusals = [missed for missed, _, feasible in rows if not feasible]
        steady = [ok for ok, calm in oks if calm]
        print(
            f"margin {margin:.0%}: the budget held in {sum(ok for ok, _ in oks)} of {len(oks)} "
            f"served picks, {sum(steady)} of the {len(steady)} whose profile read the machine's "
            f"own pace steady (no pace note); of {len(refusals)} budgets it called infeasible, "
            f"the closest setting it named passed the budget when served in {sum(refusals)}"
        )
    print(f"wall {time.time() - started:.0f} s")


def _models(args: argparse.Namespace) -> list[tuple[str, Path, ModelInputs]]:
    """MiniLM, or with --zoo the zoo's models built into a temporary folder."""
    if not args.zoo:
        return [("minilm", _model(), REQUEST)]
    import tempfile

    from batching import _zoo_models

    wanted, zoo = _zoo_models(args)
    folder = Path(tempfile.mkdtemp(prefix="batching-tuner-zoo-"))
    return [
        (name, zoo[name].build(folder / name), ModelInputs(**zoo[name].inputs.fields()))
        for name in wanted
    ]


def _rounds(
    name: str,
    model: Path,
    inputs: ModelInputs,
    args: argparse.Namespace,
    target: RunTarget,
    held: dict[float, list[tuple[bool, bool, bool]]],
) -> None:
    """`--rounds` fresh profiles of one model, each scenario's pick per margin in `held` served
    for `--seconds`; appended to `held`: whether a feasible pick held its budget (an infeasible
    one's: whether it passed it, the refusal borne out), whether its profile read the machine
    steady (optistudio.core.machine.pace), and whether the tuner called the budget feasible."""
    counts = [int(n) for n in args.instances.split(",")] if args.instances else None
    for round_ in range(args.rounds):
        profile = measure_latency_profile(
            model, max_batch_size=MAX_BATCH, inputs=inputs,
            min_seconds=args.profile_seconds, target=target,
        )  # fmt: skip
        ceiling = profile.ceiling(MAX_BATCH, with_handoff=True)[0]
        pace = profile.environment.get("machine_pace") or {}
        calm = not profile.pace_note()
        print(f"{name} round {round_}: the machine's own pace while profiling: slowest window "
              f"{pace.get('spread', 1.0):.2f}x the fastest, {pace.get('slow_share', 0.0):.0%} "
              f"slow ({'steady' if calm else 'moved: the pick says so'})", flush=True)  # fmt: skip
        latency = profile.latency_ms(MAX_BATCH)
        if args.zoo:  # a fast model's batch takes less than serving one request costs
            one = BatchingSettings(max_batch_size=1, timeout_ms=0)
            latency = max(latency, simulate(profile, one, rate=0.1 * ceiling).p99_ms)
        for scenario, share, budget_factor in SCENARIOS:
            budget = round(budget_factor * latency, 2)
            measured_picks: dict[tuple, tuple[float, float]] = {}
            for margin in held:
                rate = share * ceiling if share else None
                advice = recommend(
                    profile, p99_budget_ms=budget, rate=rate, max_batch_size=MAX_BATCH,
                    margin=margin, instances=counts,
                )  # fmt: skip
                served_rate = rate if rate is not None else advice.predicted.throughput
                chosen = advice.settings
                key = (chosen.max_batch_size, chosen.timeout_ms, chosen.instances, served_rate)
                if key not in measured_picks:  # the same pick at the same rate: measured once
                    run = measure_load(
                        model, advice.settings, rate=served_rate, seconds=args.seconds,
                        inputs=inputs, target=target,
                    )  # fmt: skip
                    measured_picks[key] = (
                        run.result.p99_ms,
                        overall_slowdown(run.batches, profile),
                    )
                p99, slow = measured_picks[key]
                ok = advice.feasible and p99 <= budget
                # an infeasible budget is said so and promises nothing: was the refusal right?
                held[margin].append(
                    (ok if advice.feasible else p99 > budget, calm, advice.feasible)
                )
                slower = "-" if advice.p99_slower_ms is None else f"{advice.p99_slower_ms:.1f}"
                pick = f"b{key[0]} t{key[1]:g}" + (f" x{key[2]}" if key[2] > 1 else "")
                print(
                    f"{name:<15}{round_:<6}{scenario:<16}{budget:>8g}{margin:>8.0%}{pick:>12}"
                    f"{served_rate:>7.0f}{advice.predicted.p99_ms:>10.1f}{slower:>9}{p99:>10.1f}"
                    f"{('yes' if ok else 'NO') if advice.feasible else 'none':>6}{slow:>6.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
