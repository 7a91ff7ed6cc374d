"""Backends: latency and throughput per backend x precision, against this machine's own peak.

For each reference model (bench/reference_models.py) and each target this machine can run:
p50 / p99 latency at batch 1, throughput at batch 8, and the achieved GFLOP/s (Conv / MatMul /
Gemm FLOPs from optistudio.core.model.flops over the p50 at batch 8) as a share of the peak measured in the same
run with a large matrix product: the better of numpy's float32 GEMM and ONNX Runtime's MatMul
on the CPU (every core), ONNX Runtime's CUDA MatMul (fp32 and fp16) on a GPU. Every run's
outputs are checked against ONNX Runtime FP32 on CPU (optistudio.core.numerics.crosscheck) with the tolerance of
its precision.

Targets (skipped with the reason when a backend or precision is not available here):
  onnxruntime cpu fp32        the stored FP32 model (the reference)
  onnxruntime cpu int8        Optistudio's int8_static (MinMax, QDQ) variant, calibrated on the
                              model's sample data
  openvino    cpu fp32 / bf16 the FP32 model; bf16 where the CPU has AVX-512 BF16 or AMX
  openvino    cpu int8        Optistudio's int8_nncf variant (nncf.quantize defaults)
  onnxruntime cuda:0 fp32     CUDA provider with IO binding (inputs stay on the GPU)
  onnxruntime cuda:0 fp16     TensorRT provider with FP16 (needs TensorRT's libraries)
  tensorrt    cuda:0 fp16     native TensorRT engine (needs the tensorrt package)

Run: .venv/bin/python bench/backends.py [--models digits,resnet50,rapidocr,minilm] [--seconds 2]
A row's GFLOP/s is the model's arithmetic over wall time: small models are launch-bound and sit
far below the peak; that is the point of the column.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import warnings
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
os.environ.setdefault("NNCF_CI", "1")  # no NNCF telemetry

import reference_models  # noqa: E402

from optistudio.core.backends import get_backend  # noqa: E402
from optistudio.core.data.datasets import open_dataset  # noqa: E402
from optistudio.core.errors import OptistudioError  # noqa: E402
from optistudio.core.measure.benchmark import BenchmarkReport, BenchmarkSpec, run_benchmark  # noqa: E402
from optistudio.core.model.flops import estimate_flops  # noqa: E402
from optistudio.core.model.intake import inspect_model  # noqa: E402
from optistudio.core.passes.base import PassContext, passes  # noqa: E402

RUNS = REPO / "data" / "bench-runs"
CPU_PEAK = "cpu fp32 (best GEMM 2048)"
THROUGHPUT_BATCH = 8


@dataclass
class Target:
    backend: str
    device: str
    precision: str
    variant: str = "fp32"  # fp32 | int8_static | int8_nncf
    provider: str | None = None
    io_binding: bool = False

    @property
    def label(self) -> str:
        via = f" via {self.provider}" if self.provider else ""
        return f"{self.backend} {self.device} {self.precision}{via}"


CPU_TARGETS = [
    Target("onnxruntime", "cpu", "fp32"),
    Target("onnxruntime", "cpu", "int8", "int8_static"),
    Target("openvino", "cpu", "fp32"),
    Target("openvino", "cpu", "bf16"),
    Target("openvino", "cpu", "int8", "int8_nncf"),
]
GPU_TARGETS = [
    Target("onnxruntime", "cuda:0", "fp32", io_binding=True),
    Target("onnxruntime", "cuda:0", "fp16", provider="tensorrt"),
    Target("tensorrt", "cuda:0", "fp16"),
]


def cpu_peak_gflops(n: int = 2048, repeats: int = 10) -> float:
    """Best float32 n x n x n product on the CPU: numpy's BLAS or ONNX Runtime's MatMul."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    a @ b  # warm-up: threads started, pages touched
    best = min(_seconds(lambda: a @ b) for _ in range(repeats))
    return max(2 * n**3 / best / 1e9, matmul_peak_gflops("cpu", "fp32", n, repeats) or 0.0)


def matmul_peak_gflops(device: str, dtype: str, n: int, repeats: int) -> float | None:
    """Best ONNX Runtime MatMul of two n x n matrices on `device`, inputs bound there."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    provider = "CUDAExecutionProvider" if device == "cuda" else "CPUExecutionProvider"
    if provider not in ort.get_available_providers():
        return None
    elem = TensorProto.FLOAT16 if dtype == "fp16" else TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])],
        "peak",
        [helper.make_tensor_value_info(x, elem, [n, n]) for x in ("a", "b")],
        [helper.make_tensor_value_info("c", elem, [n, n])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = RUNS / f"peak-matmul-{device}-{dtype}-{n}.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)
    options = {"use_tf32": 0} if device == "cuda" else {}  # fp32 is fp32, as in the backend
    session = ort.InferenceSession(str(path), providers=[(provider, options)])
    np_type = np.float16 if dtype == "fp16" else np.float32
    binding = session.io_binding()
    for name in ("a", "b"):
        data = np.random.default_rng(0).standard_normal((n, n)).astype(np_type)
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(data, device, 0))
    binding.bind_output("c", device, 0)
    session.run_with_iobinding(binding)
    best = min(_seconds(lambda: session.run_with_iobinding(binding)) for _ in range(repeats))
    return 2 * n**3 / best / 1e9


def _seconds(work) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


MODELS = {
    "digits": lambda folder: reference_models.digits_cnn(folder)[:2],
    "resnet50": lambda folder: reference_models.resnet50_shaped(folder, 224)[:2],
    "rapidocr": lambda folder: reference_models.rapidocr_det(folder, 320)[:2],
    "minilm": lambda folder: reference_models.minilm(folder, seq=128)[:2],
}
DIMS = {"minilm": {"sequence": 128}}
SHAPES = {"rapidocr": {"x": [1, 3, 320, 320]}, "resnet50": {"image": [1, 3, 224, 224]}}


def variant(model: Path, data: Path, kind: str, folder: Path) -> Path:
    """The model itself, or its INT8 variant made by Optistudio's pass (cached per run)."""
    if kind == "fp32":
        return model
    out = folder / f"{model.stem}-{kind}.onnx"
    if out.exists():
        return out
    info = inspect_model(model)
    context = PassContext(
        work_dir=folder / f"{model.stem}-{kind}-work",
        target_backend="openvino" if kind == "int8_nncf" else "onnxruntime",
        calibration=open_dataset(data, info.inputs, batch_size=8),
    )
    context.work_dir.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return passes.get(kind).run(model, out, {}, context).output


def gflops(model: Path, report: BenchmarkReport, batch: int) -> float | None:
    import onnx

    result = next((r for r in report.results if r.batch_size == batch), None)
    if result is None:
        return None
    info = inspect_model(model)
    shapes = {}
    for tensor in info.inputs:
        given = report.spec.shapes.get(tensor.name, tensor.shape)
        dims = [batch if i == 0 else d for i, d in enumerate(given)]
        named = report.spec.dims
        shapes[tensor.name] = tuple(
            d if isinstance(d, int) and d > 0 else named.get(str(d), 128) for d in dims
        )
    flops = estimate_flops(onnx.load(str(model), load_external_data=False), input_shapes=shapes)
    return flops / (result.latency["p50_ms"] / 1000) / 1e9 if flops else None


def available(target: Target) -> str | None:
    """None when the target can run here, else why not."""
    availability = get_backend(target.backend).availability()
    if not availability.ok:
        return availability.reason
    if target.device.split(":")[0] not in availability.devices:
        return f"no {target.device} for {target.backend} here ({availability.reason})"
    if target.variant == "int8_nncf":
        import importlib.util

        if importlib.util.find_spec("nncf") is None:
            return "nncf is not installed"
    return None


def measure(name: str, target: Target, folder: Path, seconds: float) -> dict:
    model, data = MODELS[name](folder)
    row: dict = {"model": name, "target": target.label}
    reason = available(target)
    if reason:
        return row | {"skipped": reason}
    try:
        path = variant(model, data, target.variant, folder)
        spec = BenchmarkSpec(
            backend=target.backend,
            device=target.device,
            precision=target.precision,  # type: ignore[arg-type]
            execution_provider=target.provider,
            io_binding=target.io_binding,
            batch_sizes=[1, THROUGHPUT_BATCH],
            dims=DIMS.get(name, {}),
            shapes=SHAPES.get(name, {}),
            min_seconds=seconds,
            max_seconds=max(4 * seconds, 4.0),
        )
        report = run_benchmark(path, spec)
    except OptistudioError as exc:  # one target failing must not lose the others
        return row | {"skipped": str(exc)}
    one, batch = report.results[0], report.results[-1]
    check = report.output_check
    return row | {
        "p50_ms_b1": one.latency["p50_ms"],
        "p99_ms_b1": one.latency["p99_ms"],
        "throughput_b8": batch.throughput,
        "gflops_b8": gflops(path, report, THROUGHPUT_BATCH),
        "stable": one.stable and batch.stable,
        "contended": one.contention.contended or batch.contention.contended,
        "output_check": check.summary if check else "reference",
        "output_ok": check.passed if check else True,
        "details": {
            key: report.runtime_details.get(key)
            for key in ("providers", "inference_precision", "layer_precisions", "fallback")
            if key in report.runtime_details
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="digits,resnet50,rapidocr,minilm")
    parser.add_argument("--seconds", type=float, default=2.0, help="least timed seconds per batch")
    parser.add_argument("--folder", type=Path, default=reference_models.DEFAULT_FOLDER)
    parser.add_argument("--gpu-only", action="store_true", help="only the GPU targets")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    peaks = {CPU_PEAK: cpu_peak_gflops()}
    for dtype in ("fp32", "fp16"):
        peak = matmul_peak_gflops("cuda", dtype, 8192, 10)
        if peak:
            peaks[f"cuda:0 {dtype} (ORT MatMul 8192)"] = peak
    for label, value in peaks.items():
        print(f"peak {label}: {value:,.0f} GFLOP/s")
    targets = ([] if args.gpu_only else CPU_TARGETS) + GPU_TARGETS
    rows = []
    for name in args.models.split(","):
        for target in targets:
            row = measure(name, target, args.folder, args.seconds)
            peak_key = next((k for k in peaks if k.startswith(target.device.split(":")[0])), None)
            if target.device.startswith("cuda"):
                dtype = "fp16" if target.precision == "fp16" else "fp32"
                peak_key = next((k for k in peaks if k.startswith(f"cuda:0 {dtype}")), None)
            if row.get("gflops_b8") and peak_key:
                row["peak_share"] = row["gflops_b8"] / peaks[peak_key]
            rows.append(row)
            print(format_row(row), flush=True)
    again = cpu_peak_gflops()  # a second reading: the peak is the better of the two
    if again > peaks[CPU_PEAK]:
        peaks[CPU_PEAK] = again
        for row in rows:
            if row.get("gflops_b8") and not row["target"].split()[1].startswith("cuda"):
                row["peak_share"] = row["gflops_b8"] / again
    print(f"peak {CPU_PEAK} (best of a reading before and after): {peaks[CPU_PEAK]:,.0f} GFLOP/s")
    RUNS.mkdir(parents=True, exist_ok=True)
    out = RUNS / f"backends-{date.today()}.json"
    out.write_text(json.dumps({"peaks_gflops": peaks, "rows": rows}, indent=2, default=str))
    print(f"wrote {out}")
    return 0


def format_row(row: dict) -> str:
    head = f"{row['model']:<9} {row['target']:<34}"
    if "skipped" in row:
        return f"{head} skipped: {row['skipped'][:110]}"
    flops = f"{row['gflops_b8']:8.1f}" if row.get("gflops_b8") else "       -"
    share = f"{100 * row['peak_share']:5.1f}%" if row.get("peak_share") else "     -"
    flags = ("" if row["stable"] else " unstable") + (" contended" if row["contended"] else "")
    check = "ok" if row["output_ok"] else "FAILED: " + row["output_check"]
    return (
        f"{head} p50 {row['p50_ms_b1']:8.3f} ms  p99 {row['p99_ms_b1']:8.3f} ms  "
        f"thr@8 {row['throughput_b8']:9.1f}/s  {flops} GFLOP/s {share} of peak  "
        f"outputs {check}{flags}"
    )


if __name__ == "__main__":
    sys.exit(main())
