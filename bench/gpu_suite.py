"""The GPU suite: one run on a CUDA machine, one table of ratios, in under 8 minutes.

    .venv/bin/python bench/gpu_suite.py [--seconds 4] [--out DIR]

It measures, with the engine as a library, on a ResNet-50-shaped CNN built in code (random
weights, dynamic batch, 224x224; the shapes and FLOPs are what matter for timing):
- ONNX Runtime CUDA FP32 vs FP16 (the fp16 pass's variant) and INT8 (int8_dynamic; reported as
  unsupported when the CUDA provider refuses it), each through `run_benchmark` on cuda:0 at
  batch 1 and 32, with its outputs checked against ONNX Runtime FP32 on the CPU;
- dynamic batching (PipelineOptimizer, max batch 32, timeout 50 ms, 64 closed-loop clients of
  one row each) against serving one request at a time: the brief claims 120 -> 340 qps on a T4;
- memory_pool_ratio: the CUDA arena limit the session got (gpu_mem_limit / the GPU's memory),
  and that a tiny ratio makes a batch of 32 fail with the arena's message;
- hardware video decode (h264_cuvid) against software decode, when PyAV offers it.

Without a CUDA device and ONNX Runtime's CUDA provider it prints one line saying so and what it
would measure, and exits 0 (tests/bench/test_gpu_suite.py runs it that way).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.backends import SessionOptions, get_backend
from optistudio.core.errors import OptistudioError, first_line
from optistudio.core.machine.gpus import gpu_memory_bytes, nvidia_gpus
from optistudio.core.measure.benchmark import BenchmarkSpec, run_benchmark
from optistudio.core.numerics.crosscheck import check_outputs, reference_outputs

DEVICE = "cuda:0"
MAX_BATCH = 32
TIMEOUT_MS = 50.0
CLIENTS = 64
STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))
"""ResNet-50's bottleneck stages: (width, blocks, stride of the first block)."""
WOULD_MEASURE = (
    "ONNX Runtime CUDA FP32 vs FP16/INT8 with output checks, dynamic batching (max batch 32, "
    "50 ms) vs batch 1 on a ResNet-50-shaped CNN, the memory_pool_ratio arena limit, and "
    "h264_cuvid video decode"
)
Row = tuple[str, str, str, str]
"""(measurement, value, against, ratio)."""


def cuda_missing() -> str | None:
    """Why this machine cannot run the suite, or None when it can."""
    try:
        import onnxruntime as ort
    except ImportError:
        return "onnxruntime is not installed"
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return "this ONNX Runtime build has no CUDA provider (onnxruntime-gpu)"
    if not nvidia_gpus():
        return "no NVIDIA GPU or driver is visible"
    return None


class _Graph:
    """Nodes and random He-initialised weights of a CNN under construction."""

    def __init__(self, seed: int = 0) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.weights: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(seed)

    def conv(
        self, x: str, c_in: int, c_out: int, k: int, stride: int = 1, relu: bool = True
    ) -> str:
        name = f"conv{len(self.weights)}"
        scale = np.sqrt(2.0 / (c_in * k * k))
        w = (self.rng.standard_normal((c_out, c_in, k, k)) * scale).astype(np.float32)
        self.weights += [
            numpy_helper.from_array(w, f"{name}.w"),
            numpy_helper.from_array(np.zeros(c_out, np.float32), f"{name}.b"),
        ]
        pad = k // 2
        self.nodes.append(
            helper.make_node(
                "Conv",
                [x, f"{name}.w", f"{name}.b"],
                [name],
                kernel_shape=[k, k],
                strides=[stride, stride],
                pads=[pad] * 4,
            )
        )
        return self.relu(name) if relu else name

    def relu(self, x: str) -> str:
        self.nodes.append(helper.make_node("Relu", [x], [f"{x}.relu"]))
        return f"{x}.relu"

    def bottleneck(self, x: str, c_in: int, width: int, stride: int) -> str:
        y = self.conv(x, c_in, width, 1)
        y = self.conv(y, width, width, 3, stride)
        y = self.conv(y, width, width * 4, 1, relu=False)
        skip = (
            x
            if stride == 1 and c_in == width * 4
            else self.conv(x, c_in, width * 4, 1, stride, relu=False)
        )
        self.nodes.append(helper.make_node("Add", [y, skip], [f"{y}.add"]))
        return self.relu(f"{y}.add")


def resnet50_shaped(path: Path) -> Path:
    """A ResNet-50-shaped classifier (batch-norm folded away), dynamic batch, 224x224 input."""
    g = _Graph()
    x = g.conv("input", 3, 64, 7, 2)
    g.nodes.append(
        helper.make_node(
            "MaxPool", [x], ["pool"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4
        )
    )
    x, c_in = "pool", 64
    for width, blocks, stride in STAGES:
        for block in range(blocks):
            x = g.bottleneck(x, c_in, width, stride if block == 0 else 1)
            c_in = width * 4
    fc = (g.rng.standard_normal((c_in, 1000)) * np.sqrt(1.0 / c_in)).astype(np.float32)
    g.weights += [
        numpy_helper.from_array(fc, "fc.w"),
        numpy_helper.from_array(np.zeros(1000, np.float32), "fc.b"),
    ]
    g.nodes += [
        helper.make_node("GlobalAveragePool", [x], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"]),
    ]
    graph = helper.make_graph(
        g.nodes,
        "resnet50_shaped",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1000])],
        g.weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def variant(model: Path, pass_name: str, work: Path) -> Path:
    """The model through one of the engine's passes (no calibration data needed)."""
    from optistudio.core.passes.base import PassContext, passes

    out = work / f"{pass_name}.onnx"
    context = PassContext(work_dir=work / f"{pass_name}-work")
    context.work_dir.mkdir(parents=True, exist_ok=True)
    return passes.get(pass_name).run(model, out, {}, context).output


def precision_rows(model: Path, work: Path, seconds: float) -> list[Row]:
    """CUDA FP32 against FP16 and INT8 variants: p50 at batch 1 and 32, outputs vs CPU FP32."""
    spec = BenchmarkSpec(
        device=DEVICE,
        batch_sizes=[1, MAX_BATCH],
        check_outputs=False,
        io_binding=True,
        min_seconds=seconds,
        max_seconds=seconds * 3,
    )
    fp32 = run_benchmark(model, spec)
    base = {r.batch_size: r.latency["p50"] for r in fp32.results}
    rows = [(f"cuda fp32 p50 b{b}", f"{ms:.2f} ms", "", "1.00") for b, ms in base.items()]
    feeds = {"input": np.random.default_rng(1).standard_normal((4, 3, 224, 224)).astype(np.float32)}
    reference = reference_outputs(model, feeds)
    for name, pass_name, precision in (("fp16", "fp16", "fp16"), ("int8", "int8_dynamic", "int8")):
        try:
            path = variant(model, pass_name, work)
            report = run_benchmark(
                path, spec.model_copy(update={"precision": "fp32" if name == "fp16" else "int8"})
            )
            check = output_check(path, feeds, reference, precision)
        except OptistudioError as exc:
            rows.append((f"cuda {name}", "not supported", "cuda fp32", first_line(exc)[:60]))
            continue
        for r in report.results:
            ms = r.latency["p50"]
            rows.append(
                (
                    f"cuda {name} p50 b{r.batch_size}",
                    f"{ms:.2f} ms",
                    "cuda fp32",
                    f"{base[r.batch_size] / ms:.2f}x",
                )
            )
        rows.append((f"cuda {name} outputs vs cpu fp32", check, "", ""))
    return rows


def output_check(
    path: Path, feeds: dict[str, np.ndarray], reference: list[np.ndarray], precision: str
) -> str:
    """The variant on cuda:0 against the original on ONNX Runtime's CPU provider."""
    model = get_backend("onnxruntime").load(path, SessionOptions(device=DEVICE))
    try:
        verdict = check_outputs(["logits"], reference, model.run(feeds), precision=precision)
    finally:
        model.close()
    return verdict.summary


def batching_rows(model: Path, seconds: float) -> list[Row]:
    """Dynamic batching (max 32, 50 ms) against one request at a time, closed-loop clients."""
    from optistudio import PipelineOptimizer

    row = {"input": np.random.default_rng(2).standard_normal((1, 3, 224, 224)).astype(np.float32)}
    single = get_backend("onnxruntime").load(model, SessionOptions(device=DEVICE))
    try:
        alone = closed_loop(lambda: single.run(row), clients=1, seconds=seconds)
    finally:
        single.close()
    with PipelineOptimizer(max_batch_size=MAX_BATCH, timeout_ms=TIMEOUT_MS) as server:
        server.load(model, device=DEVICE)
        batched = closed_loop(lambda: server.predict(row), clients=CLIENTS, seconds=seconds)
        mean_batch = server.stats.mean_batch_size if server.stats else 0.0
    return [
        ("batch 1 serving", f"{alone:.0f} qps", "", "1.00"),
        (
            f"dynamic batching ({CLIENTS} clients)",
            f"{batched:.0f} qps",
            "batch 1",
            f"{batched / alone:.2f}x",
        ),
        ("  mean batch size", f"{mean_batch:.1f}", f"max {MAX_BATCH}", ""),
    ]


def closed_loop(call: Callable[[], object], *, clients: int, seconds: float) -> float:
    """Requests per second that `clients` threads, each waiting for its answer, get through."""
    done = [0] * clients
    stop = time.perf_counter() + seconds

    def client(i: int) -> None:
        while time.perf_counter() < stop:
            call()
            done[i] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done) / (time.perf_counter() - started)


def memory_pool_rows(model: Path) -> list[Row]:
    """The arena limit a memory_pool_ratio gives, and a tiny one refusing a batch of 32."""
    total = gpu_memory_bytes(0) or 0
    backend = get_backend("onnxruntime")
    session = backend.load(model, SessionOptions(device=DEVICE, memory_pool_ratio=0.5))
    limit = session.details["provider_options"].get("gpu_mem_limit", 0)
    session.close()
    rows: list[Row] = [
        (
            "memory_pool_ratio 0.5: gpu_mem_limit",
            f"{limit / 2**20:.0f} MiB",
            f"{total / 2**20:.0f} MiB",
            f"{limit / total:.3f}" if total else "-",
        )
    ]
    tiny = backend.load(model, SessionOptions(device=DEVICE, memory_pool_ratio=0.001))
    batch = {"input": np.zeros((MAX_BATCH, 3, 224, 224), np.float32)}
    try:
        tiny.run(batch)
        verdict = "ran (limit not enforced?)"
    except OptistudioError as exc:
        verdict = "refused: " + first_line(exc)[-40:]
    finally:
        tiny.close()
    return rows + [("memory_pool_ratio 0.001, batch 32", verdict, "", "")]


def video_rows(work: Path) -> list[Row]:
    """h264_cuvid against software decode of the same synthetic 1080p clip, frames per second."""
    import av

    if "h264_cuvid" not in av.codecs_available:
        return [("video decode h264_cuvid", "not offered by this PyAV/FFmpeg", "", "")]
    from optistudio.core.video.clips import make_clip
    from optistudio.core.video.decode import FrameSource

    clip = make_clip(work / "clip.mp4", seconds=4.0, fps=30, size=(1080, 1920))
    fps = {}
    for hardware in (False, True):
        source = FrameSource(clip, hardware=hardware)
        started = time.perf_counter()
        for _ in range(120):
            source.next_image()
        fps[source.decoder] = 120 / (time.perf_counter() - started)
    (soft, soft_fps), (hard, hard_fps) = fps.items()
    return [
        (f"video decode {soft}", f"{soft_fps:.0f} fps", "", "1.00"),
        (f"video decode {hard}", f"{hard_fps:.0f} fps", soft, f"{hard_fps / soft_fps:.2f}x"),
    ]


def print_table(rows: list[Row]) -> None:
    header: Row = ("measurement", "value", "against", "ratio")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(3)]
    for row in [header, *rows]:
        print("  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[3]]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="timed seconds per measurement")
    parser.add_argument("--out", type=Path, help="folder for the models (default: a temporary one)")
    args = parser.parse_args(argv)
    missing = cuda_missing()
    if missing:
        print(
            f"GPU suite not run: no CUDA device/provider is available ({missing}); on one it measures {WOULD_MEASURE}."
        )
        return 0
    with tempfile.TemporaryDirectory(prefix="gpu-suite-") as tmp:
        work = args.out or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        model = resnet50_shaped(work / "resnet50_shaped.onnx")
        rows = precision_rows(model, work, args.seconds)
        rows += batching_rows(model, args.seconds * 2)
        rows += memory_pool_rows(model)
        rows += video_rows(work)
    print(f"GPU suite on {nvidia_gpus()[0].name}")
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
