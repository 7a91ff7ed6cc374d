"""Edge: LiteRT FP32 and full-integer INT8 against ONNX Runtime FP32 on three CNNs of the zoo.

For each CNN (bench/zoo_models.py) the ONNX file is converted to .tflite once per precision
(onnx2tf + TensorFlow's converter, `optistudio.core.backends.litert_convert`; INT8 calibrated
on synthetic inputs of the model's shape, the only data the zoo has for them), then:
- speed: ONNX Runtime FP32 (A) against LiteRT (B) with the interleaved A/B comparison
  (`optistudio.core.measure.compare.compare_loaded`): the median of the paired ratios t_B / t_A
  with its bootstrap interval, both on the same thread count;
- accuracy against the original: `accuracy_report` on synthetic inputs (cosine of the output,
  top-1 agreement for classifiers, largest absolute difference) with the ONNX model on
  ONNX Runtime as the reference.

Run (needs the litert extra): python bench/edge.py [--models ppocr_cls,paddle_cnn,ir3_unlisted]
[--seconds 3] [--threads 1] [--json]. Every figure names the input shape and the threads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
os.environ.setdefault("NNCF_CI", "1")

import zoo_models  # noqa: E402

from optistudio.core.backends import get_backend  # noqa: E402
from optistudio.core.backends.litert_convert import (  # noqa: E402
    convert_many,
    converter_versions,
    write_calibration,
)
from optistudio.core.data.datasets import SyntheticDataset  # noqa: E402
from optistudio.core.machine.environment import fingerprint  # noqa: E402
from optistudio.core.measure.compare import ComparisonSpec, compare_models  # noqa: E402
from optistudio.core.model.intake import inspect_model  # noqa: E402
from optistudio.core.numerics.accuracy import accuracy_report  # noqa: E402

DEFAULT_MODELS = ("ppocr_cls", "paddle_cnn", "ir3_unlisted")
PRECISIONS = ("fp32", "int8")


def measure(name: str, folder: Path, seconds: float, threads: int) -> list[dict[str, Any]]:
    """One row per LiteRT precision of zoo model `name` (or one row saying why it failed)."""
    entry = next(m for m in zoo_models.zoo() if m.name == name)
    model = entry.build(folder / name)
    info = inspect_model(model)
    shapes = dict(entry.inputs.shapes)
    data = SyntheticDataset(info.inputs, samples=64, shapes=shapes, dims=entry.inputs.dims)
    calibration = write_calibration(data.batches(), folder / f"{name}-calibration.npz")
    fixed = {i.name: [1, *list(next(iter(data.batches()))[i.name].shape[1:])] for i in info.inputs}
    outs = {p: folder / f"{name}-{p}.tflite" for p in PRECISIONS}
    converted = convert_many(model, outs, calibration=calibration, shapes=fixed)  # type: ignore[arg-type]
    rows = []
    for precision in PRECISIONS:
        row: dict[str, Any] = {"model": name, "precision": precision, "shape": fixed}
        if not converted[precision].get("ok"):
            rows.append(row | {"error": converted[precision].get("error")})
            continue
        tflite = outs[precision]
        row["tflite_kb"] = round(tflite.stat().st_size / 1024)
        row |= _accuracy(model, tflite, info, shapes or fixed)
        row |= _speed(model, tflite, info, fixed, seconds, threads)
        rows.append(row)
    return rows


def _accuracy(model: Path, tflite: Path, info: Any, shapes: dict[str, list[int]]) -> dict[str, Any]:
    data = SyntheticDataset(info.inputs, samples=32, shapes=shapes, seed=1)
    report = accuracy_report(model, tflite, data, candidate_backend="litert")
    return {
        "cosine_mean": round(report.mean_cosine, 5),
        "cosine_min": round(report.min_cosine, 5),
        "top1_agreement": report.top1_agreement,
        "max_abs_error": float(f"{report.max_abs_error:.3g}"),
    }


def _speed(
    model: Path,
    tflite: Path,
    info: Any,
    shapes: dict[str, list[int]],
    seconds: float,
    threads: int,
) -> dict[str, Any]:
    spec = ComparisonSpec(
        backend="onnxruntime",
        candidate_backend="litert",
        shapes=shapes,
        threads=threads,
        min_pairs=30,
        min_seconds=seconds,
        max_seconds=seconds * 4,
    )
    result = compare_models(model, tflite, spec, info_a=info, info_b=info)
    return {
        "ort_p50_ms": round(result.a_p50_ms, 3),
        "litert_p50_ms": round(result.b_p50_ms, 3),
        "ratio": round(result.ratio, 3),
        "ratio_low": round(result.low, 3),
        "ratio_high": round(result.high, 3),
        "verdict": result.verdict,
        "pairs": result.pairs,
        "threads": result.threads,
    }


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table (ratio = LiteRT p50 / ONNX Runtime FP32 p50; < 1 faster)."""
    lines = [
        "| model | input | LiteRT | ORT FP32 p50 ms | LiteRT p50 ms | ratio [interval] | "
        "cosine mean / min | top-1 agree | .tflite KB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        shape = " ".join(f"{k}={'x'.join(map(str, v))}" for k, v in row["shape"].items())
        if "error" in row:
            lines.append(
                f"| {row['model']} | {shape} | {row['precision']} | failed: {row['error']} |||||"
            )
            continue
        top1 = "-" if row["top1_agreement"] is None else f"{row['top1_agreement']:.3f}"
        lines.append(
            f"| {row['model']} | {shape} | {row['precision']} | {row['ort_p50_ms']} | "
            f"{row['litert_p50_ms']} | {row['ratio']} [{row['ratio_low']}, {row['ratio_high']}] "
            f"| {row['cosine_mean']} / {row['cosine_min']} | {top1} | {row['tflite_kb']} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS))
    parser.add_argument("--seconds", type=float, default=3.0, help="least timed seconds a pair")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    availability = get_backend("litert").availability()
    if not availability.ok:
        print(f"LiteRT cannot run here: {availability.reason}", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="edge-") as folder:
        for name in args.models.split(","):
            rows += measure(name, Path(folder), args.seconds, args.threads)
    environment = fingerprint(threads=args.threads) | {"converter": converter_versions()}
    if args.json:
        print(json.dumps({"rows": rows, "environment": environment}, indent=2, default=str))
    else:
        print(table(rows))
        print(f"\nCPU: {environment.get('cpu_model')}; flags: {environment.get('isa_flags')}")
        print(f"converter: {environment['converter']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
