"""Are comparisons repeatable on a noisy machine? Absolute p50 spread vs paired-ratio spread.

The same comparison (MiniLM FP32 = A vs its dynamic-INT8 variant = B, batch 1, sequence 128) is
run `--runs` times on a quiet machine and once more with CPU burners (one per core) beside it.
Each run is one interleaved A/B comparison (optistudio.core.measure.compare), which also yields both absolute p50s.
Spread = (max - min) / median over the runs. Target: the ratio's spread stays within 5 % while
the absolute latencies move far more.

Needs the bench extra for the real transformer: `.venv/bin/pip install -e '.[bench]'`.
Run: .venv/bin/python bench/repeatability.py [--runs 5] [--seconds 6]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from optistudio.core.measure.compare import Comparison, ComparisonSpec, compare_models  # noqa: E402


@contextmanager
def cpu_burners(count: int):
    """`count` processes spinning at 100 % until the block ends."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        time.sleep(0.5)
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def models() -> tuple[Path, Path]:
    try:
        from minilm import export_minilm, quantize_dynamic_int8
    except SystemExit:
        raise
    folder = REPO / "data" / "bench-models"
    fp32 = export_minilm(folder)
    return fp32, quantize_dynamic_int8(fp32, folder / "minilm-int8-dynamic.onnx")


def run_once(fp32: Path, int8: Path, seconds: float, threads: int | None) -> Comparison:
    spec = ComparisonSpec(
        batch_size=1,
        dims={"sequence": 128},
        min_pairs=30,
        threads=threads,
        min_seconds=seconds,
        max_seconds=4 * seconds,
    )
    return compare_models(fp32, int8, spec)


def line(label: str, c: Comparison) -> str:
    return (
        f"{label:<12} A(fp32) p50 {c.a_p50_ms:8.2f} ms   B(int8) p50 {c.b_p50_ms:8.2f} ms   "
        f"B/A {c.ratio:.3f} [{c.low:.3f}, {c.high:.3f}]  {c.pairs:4d} pairs  {c.verdict}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--threads", type=int, help="intra-op threads (default: runtime's)")
    args = parser.parse_args()
    fp32, int8 = models()
    cores = len(os.sched_getaffinity(0))
    print(
        f"A = {fp32.name}, B = {int8.name}; batch 1, sequence 128, "
        f"threads {args.threads or 'default'}, {cores} cores"
    )
    runs = []
    for index in range(args.runs):
        runs.append(run_once(fp32, int8, args.seconds, args.threads))
        print(line(f"quiet {index + 1}", runs[-1]), flush=True)
    with cpu_burners(cores):
        runs.append(run_once(fp32, int8, args.seconds, args.threads))
    print(line("burners", runs[-1]))
    quiet = runs[:-1]
    for label, group in (("quiet runs", quiet), ("all runs", runs)):
        print(
            f"{label:<11} spread of A p50 {spread([c.a_p50_ms for c in group]):6.1%}   "
            f"B p50 {spread([c.b_p50_ms for c in group]):6.1%}   "
            f"ratio {spread([c.ratio for c in group]):6.1%}   (target ratio <= 5 %)"
        )
    slowdown = runs[-1].a_p50_ms / statistics.median(c.a_p50_ms for c in quiet)
    print(
        f"burners moved A's absolute p50 by {slowdown:.2f}x; the ratio moved by "
        f"{runs[-1].ratio / statistics.median(c.ratio for c in quiet):.3f}x"
    )


if __name__ == "__main__":
    main()
