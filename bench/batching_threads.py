"""What the serving threads cost a model behind the Pipeline, by ONNX Runtime thread setting.

For each setting (all cores with idle threads spinning, the runtime's old default; all cores
without spinning, what the Pipeline now uses; one thread, leaving a core to the serving
threads), three rounds of: a profile (bare back-to-back runs), 10 s of Poisson arrivals at 50 %
of the profile's ceiling and 6 s of a saturating closed loop through the real Pipeline (max
batch 4). Printed per round: the runner time of the served batches over the profile's ("runner
vs profile"; 1.00 = the profile describes service) and the closed loop's throughput over the
profile's ceiling. Then, at batch 1 with one thread, how long slow spells are: the p99 of the
mean of 16 runs in a row over the overall mean, bare and served (a closed loop of 16 and
Poisson at 50 %).

Run: .venv/bin/python bench/batching_threads.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from batching import _model  # noqa: E402

from optistudio.core.backends.target import RunTarget  # noqa: E402
from optistudio.core.batching.latency_profile import measure_latency_profile  # noqa: E402
from optistudio.core.batching.settings import BatchingSettings  # noqa: E402
from optistudio.core.batching.trace import overall_slowdown  # noqa: E402
from optistudio.core.batching.verify import measure_load  # noqa: E402
from optistudio.core.data.model_inputs import ModelInputs  # noqa: E402

REQUEST = ModelInputs(
    shapes={name: [1, 32] for name in ("input_ids", "attention_mask", "token_type_ids")}
)
SETTINGS = {
    "all cores, spinning": RunTarget(spin_wait=True),
    "all cores, no spinning": RunTarget(spin_wait=False),
    "one thread": RunTarget(threads=1, spin_wait=False),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    model = _model()
    for label, target in SETTINGS.items():
        rounds = [_round(model, target, seed) for seed in range(args.rounds)]
        runner = " / ".join(f"{r[0]:.2f}x" for r in rounds)
        share = " / ".join(f"{r[1]:.2f}" for r in rounds)
        print(f"{label:<24} runner vs profile (Poisson 50 %): {runner}; closed loop / ceiling: "
              f"{share}", flush=True)  # fmt: skip
    _spells(model)


def _round(model: Path, target: RunTarget, seed: int) -> tuple[float, float]:
    profile = measure_latency_profile(
        model, max_batch_size=4, inputs=REQUEST, min_seconds=1.0, target=target
    )
    ceiling = profile.ceiling(4)[0]
    poisson = measure_load(
        model, BatchingSettings(max_batch_size=4, timeout_ms=2), rate=0.5 * ceiling,
        process="poisson", seconds=10, inputs=REQUEST, target=target, seed=seed,
    )  # fmt: skip
    closed = measure_load(
        model, BatchingSettings(max_batch_size=4, timeout_ms=5), rate=None, process="closed",
        clients=8, seconds=6, inputs=REQUEST, target=target,
    )  # fmt: skip
    return overall_slowdown(poisson.batches, profile), closed.result.throughput / ceiling


def _spells(model: Path) -> None:
    target = SETTINGS["one thread"]
    profile = measure_latency_profile(
        model, max_batch_size=1, inputs=REQUEST, min_seconds=4.0, target=target
    )
    single = BatchingSettings(max_batch_size=1, timeout_ms=0)
    closed = measure_load(
        model, single, rate=None, process="closed", clients=16, seconds=10, inputs=REQUEST,
        target=target,
    )  # fmt: skip
    poisson = measure_load(
        model, single, rate=0.5 * profile.ceiling(1)[0], process="poisson", seconds=10,
        inputs=REQUEST, target=target,
    )  # fmt: skip
    rows = {
        "bare (the profile)": [ms for _, ms in profile.runs],
        "served, closed loop of 16": _runner_ms(closed.batches),
        "served, Poisson 50 %": _runner_ms(poisson.batches),
    }
    for label, runs in rows.items():
        values = np.asarray(runs)
        spells = np.convolve(values, np.ones(16) / 16, mode="valid")
        print(f"batch 1, one thread, {label:<27} mean {values.mean():.2f} ms, 16 runs in a row: "
              f"p99 {np.percentile(spells, 99) / values.mean():.3f} x the mean")  # fmt: skip


def _runner_ms(batches) -> list[float]:  # type: ignore[no-untyped-def]
    return [(batch.run_end - batch.run_start) * 1000 for batch in batches]


if __name__ == "__main__":
    main()
