"""What the diagnostics cost and what they can see.

1. Profiler overhead: `optistudio.core.diagnose.operator_profile.profile_model` runs the plain (unprofiled) session and the
   profiled one alternately, same model, same inputs, same process; the ratio of their median
   wall times is the profiler's overhead. Rounds are repeated and the median ratio printed, for
   ONNX Runtime (Chrome-trace JSON) and OpenVINO (PERF_COUNT), on the tiny_cnn sample (batch 8)
   and on the PP-OCRv4 detector at 320x320 when its file is available.
2. Soak sensitivity: a real ONNX Runtime session on tiny_cnn, wrapped so that every inference
   makes N more bytes resident (N = 0 is the clean baseline), soaked for the default duration of
   `optistudio.core.measure.soak.SoakSpec` in a fresh process each (so memory freed by one run cannot hide the next
   one's growth). Prints the verdict, the fitted slope and its interval per N, and the smallest
   N flagged.

Run: .venv/bin/python bench/diagnostics.py [--rounds 3] [--seconds 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from optistudio.core.backends import LoadedModel, SessionOptions, get_backend  # noqa: E402
from optistudio.core.diagnose.operator_profile import OperatorProfileSpec, measure_operator_profile  # noqa: E402
from optistudio.core.measure.soak import SoakSpec, input_variants, soak_loaded  # noqa: E402
from optistudio.core.model.intake import inspect_model  # noqa: E402
from optistudio.core.model.samples import build_sample  # noqa: E402

LEAKS = (0, 1, 4, 16, 64, 256, 1024)
BUFFER_BYTES = 4 * 2**30


def overhead(model: Path, dims: dict[str, int], batch: int, rounds: int) -> None:
    for backend in ("onnxruntime", "openvino"):
        spec = OperatorProfileSpec(
            backend=backend, batch_size=batch, dims=dims, runs=30, warmup_runs=5
        )
        ratios, plain, profiled = [], [], []
        with tempfile.TemporaryDirectory() as work:
            for _ in range(rounds):
                result = measure_operator_profile(model, spec, work_dir=Path(work))
                ratios.append(result.overhead)
                plain.append(result.plain_ms)
                profiled.append(result.profiled_ms)
        print(
            f"| {model.stem} b{batch} | {backend} | {statistics.median(plain):.3f} | "
            f"{statistics.median(profiled):.3f} | {statistics.median(ratios):.2f}x "
            f"({min(ratios):.2f}-{max(ratios):.2f}) |",
            flush=True,
        )


class Leaking(LoadedModel):
    """Grows RSS by exactly `leak` bytes per inference: each run writes the next `leak` bytes of
    a large buffer that was only reserved (untouched pages are not resident)."""

    def __init__(self, inner: LoadedModel, leak: int) -> None:
        self.inner, self.leak, self.offset = inner, leak, 0
        self.buffer = np.empty(BUFFER_BYTES if leak else 0, dtype=np.uint8)
        self.details = inner.details

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        if self.leak and self.offset + self.leak <= BUFFER_BYTES:
            self.buffer[self.offset : self.offset + self.leak] = 1
            self.offset += self.leak
        return self.inner.run(feeds)


def soak_child(leak: int, seconds: float) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        model = build_sample("tiny_cnn", Path(scratch))
        spec = SoakSpec(seconds=seconds)
        variants, _ = input_variants(inspect_model(model), spec)
        inner = get_backend("onnxruntime").load(model, SessionOptions(threads=1))
        report = soak_loaded(Leaking(inner, leak), variants, spec)
    print(json.dumps(report.model_dump(mode="json", exclude={"samples", "environment"})))


def sensitivity(seconds: float) -> None:
    flagged = []
    for leak in LEAKS:
        done = subprocess.run(
            [sys.executable, __file__, "--soak-child", str(leak), "--seconds", str(seconds)],
            capture_output=True,
            text=True,
            check=True,
        )
        report = json.loads(done.stdout.strip().splitlines()[-1])
        print(
            f"| {leak} | {report['verdict']} | {report['slope_bytes']:,.0f} "
            f"({report['slope_low']:,.0f} to {report['slope_high']:,.0f}) | "
            f"{report['inferences']:,} | {report['fitted_growth_mb']:.1f} |",
            flush=True,
        )
        if report["verdict"] == "leak suspected":
            flagged.append(leak)
    clean = 0 not in flagged
    smallest = min((leak for leak in flagged if leak), default=None)
    print(f"\nclean baseline stable: {clean}; smallest leak flagged in {seconds:g} s: {smallest} B")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=SoakSpec().seconds)
    parser.add_argument("--only", choices=["overhead", "soak"], help="run one part")
    parser.add_argument("--soak-child", type=int)
    args = parser.parse_args()
    if args.soak_child is not None:
        soak_child(args.soak_child, args.seconds)
        return
    if args.only != "soak":
        profiler_overhead(args.rounds)
    if args.only != "overhead":
        print(
            "\n| leak per inference (B) | verdict | slope B/inference (95 % CI) | inferences | MiB |"
        )
        print("| --- | --- | --- | --- | --- |")
        sensitivity(args.seconds)


def profiler_overhead(rounds: int) -> None:
    print("| model | backend | plain ms | profiled ms | profiled / plain (min-max) |")
    print("| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as scratch:
        overhead(build_sample("tiny_cnn", Path(scratch)), {}, 8, rounds)
        ocr = REPO / "data" / "bench-models" / "ch_PP-OCRv4_det_infer.onnx"
        if ocr.exists():
            dims = {
                str(d): 320 for d in inspect_model(ocr).inputs[0].shape[2:] if isinstance(d, str)
            }
            overhead(ocr, dims, 1, rounds)
        else:
            print(f"(skipped the PP-OCRv4 detector: {ocr} is not there)")


if __name__ == "__main__":
    main()
