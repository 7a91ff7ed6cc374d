"""How many real-time 25 fps streams at 640x360 this machine holds, for two small CNNs, batched
against per-frame (max batch 1), FP32 against INT8 (the int8_static pass, calibrated on the
clip's own frames), in one run. Also each setting's fast-mode throughput at 8 streams, batched
and per-frame run in alternating pairs (A B, B A, ...) so that a shared machine's load hits both
alike; the batched / per-frame ratio is the median over the pairs, with its range.

    .venv/bin/python bench/video.py [--probe-seconds 2] [--max-streams 32] [--fast-seconds 3]
                                    [--pairs 4]
    .venv/bin/python bench/video.py --short    # 1 s probes, up to 8 streams, 3 pairs of 1.5 s

The clip is made here with PyAV's encoder (moving rectangles, libx264); nothing is downloaded.
Capacity is `optistudio.core.video.run.capacity`: the largest stream count whose every stream
delivers >= 95 % of 25 fps with its p99 latency within one frame interval (40 ms).
"""

from __future__ import annotations

import argparse
import platform
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.backends import SessionOptions, get_backend
from optistudio.core.batching.pipeline import Runner
from optistudio.core.batching.settings import (
    BatchingSettings,
    serving_options,
    with_serving_threads,
)
from optistudio.core.data.images import ImagePreprocessing, preprocess
from optistudio.core.machine.environment import cpu_model, isa_flags
from optistudio.core.model.info import TensorSpec
from optistudio.core.model.intake import inspect_model
from optistudio.core.passes.base import PassContext
from optistudio.core.passes.quantize import Int8StaticConfig, run_int8_static
from optistudio.core.video.clips import make_clip
from optistudio.core.video.decode import FrameSource
from optistudio.core.video.engine import play
from optistudio.core.video.report import Capacity, VideoRun
from optistudio.core.video.run import capacity
from optistudio.core.video.settings import VideoSettings

SIZE = (360, 640)
FPS = 25
MODELS = {"cnn-s (3 conv, 128x224)": ((128, 224), [16, 32, 64]),
          "cnn-m (5 conv, 192x320)": ((192, 320), [16, 32, 64, 64, 128])}  # fmt: skip


def build_cnn(path: Path, size: tuple[int, int], widths: list[int]) -> Path:
    """Stride-2 3x3 conv + relu per width, global average pool, 10 logits; batch dim dynamic."""
    rng = np.random.default_rng(0)
    nodes, inits, prev, channels = [], [], "x", 3
    for i, width in enumerate(widths):
        w = (
            rng.standard_normal((width, channels, 3, 3)).astype(np.float32)
            * (2 / (9 * channels)) ** 0.5
        )
        inits += [
            numpy_helper.from_array(w, f"w{i}"),
            numpy_helper.from_array(np.zeros(width, np.float32), f"b{i}"),
        ]
        nodes += [helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1], strides=[2, 2]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]  # fmt: skip
        prev, channels = f"r{i}", width
    head = rng.standard_normal((channels, 10)).astype(np.float32) * 0.1
    inits.append(numpy_helper.from_array(head, "head"))
    nodes += [helper.make_node("GlobalAveragePool", [prev], ["g"]),
              helper.make_node("Flatten", ["g"], ["f"]), helper.make_node("MatMul", ["f", "head"], ["y"])]  # fmt: skip
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, *size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 10])], initializer=inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return path


class ClipFrames:
    """Calibration batches: the clip's frames, preprocessed like the streams'."""

    def __init__(self, clip: Path, size: tuple[int, int], count: int = 32) -> None:
        self.clip, self.size, self.count = clip, size, count
        self.description = f"{count} frames of {clip.name}"

    def batches(self) -> Iterator[dict[str, np.ndarray]]:
        source, pre = FrameSource(self.clip, hardware=False), ImagePreprocessing()
        for _ in range(self.count // 8):
            yield {
                "x": np.stack([preprocess(source.next_image(), pre, self.size) for _ in range(8)])
            }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--probe-seconds", type=float, default=2.0)
    parser.add_argument("--max-streams", type=int, default=32)
    parser.add_argument("--fast-seconds", type=float, default=3.0)
    parser.add_argument("--pairs", type=int, default=4, help="fast runs per setting, paired")
    parser.add_argument(
        "--short", action="store_true", help="1 s probes, up to 8 streams, 3 pairs of 1.5 s"
    )
    args = parser.parse_args()
    if args.short:
        args.probe_seconds, args.max_streams, args.fast_seconds = 1.0, 8, 1.5
        args.pairs = 3
    work = Path(tempfile.mkdtemp(prefix="video-bench-"))
    clip = make_clip(work / "clip.mp4", seconds=4, fps=FPS, size=SIZE)
    print(f"clip 640x360 @ {FPS} fps, {cpu_model() or platform.machine()}, "
          f"threads {with_serving_threads(serving_options()).threads}, "
          f"probes {args.probe_seconds:g} s up to {args.max_streams} streams")  # fmt: skip
    print(f"CPU flags: {' '.join(isa_flags()) or 'unknown'}")
    print(
        "| model | precision | real-time streams, batched | per-frame | fast fps at 8 streams, "
        "batched / per-frame | batched / per-frame, paired | mean batch | decode CPU share |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")  # fmt: skip
    for name, (size, widths) in MODELS.items():
        fp32 = build_cnn(work / f"{widths[-1]}-{len(widths)}.onnx", size, widths)
        int8 = work / f"{fp32.stem}-int8.onnx"
        context = PassContext(work_dir=work / f"q-{fp32.stem}", calibration=ClipFrames(clip, size))
        run_int8_static(fp32, int8, Int8StaticConfig(), context)
        for precision, path in (("FP32", fp32), ("INT8", int8)):
            _row(name, precision, path, clip, size, args)


BATCHED = BatchingSettings(max_batch_size=8, timeout_ms=5)
PER_FRAME = BatchingSettings(max_batch_size=1)


def _row(name: str, precision: str, path: Path, clip: Path, size: tuple[int, int],
         args: argparse.Namespace) -> None:  # fmt: skip
    """Capacity batched and per-frame, then fast runs at 8 streams in pairs (A B, B A, ...), so
    the neighbours' load hits both settings of a pair alike; the ratio is the pairs' median."""
    loaded = get_backend("onnxruntime").load(
        path, with_serving_threads(SessionOptions(spin_wait=False))
    )
    inputs = inspect_model(path).inputs
    try:
        found = [
            capacity(loaded.run, inputs, [clip], VideoSettings(batching=batching), size,
                     args.max_streams, args.probe_seconds)
            for batching in (BATCHED, PER_FRAME)
        ]  # fmt: skip
        fast: dict[int, list[VideoRun]] = {8: [], 1: []}
        for pair in range(args.pairs):
            order = (BATCHED, PER_FRAME) if pair % 2 == 0 else (PER_FRAME, BATCHED)
            for batching in order:
                fast[batching.max_batch_size].append(_fast(loaded.run, inputs, clip, size,
                                                           batching, args))  # fmt: skip
    finally:
        loaded.close()
    ratios = [b.fps / p.fps for b, p in zip(fast[8], fast[1], strict=True) if p.fps]
    batched_fps = float(np.median([run.fps for run in fast[8]]))
    single_fps = float(np.median([run.fps for run in fast[1]]))
    spread = f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else "-"
    print(f"| {name} | {precision} | {_held(found[0])} | {_held(found[1])} | "
          f"{batched_fps:.0f} / {single_fps:.0f} | "
          f"{float(np.median(ratios)):.2f}x ({len(ratios)} pairs, {spread}) | "
          f"{np.mean([run.mean_batch_size for run in fast[8]]):.2f} | "
          f"{np.mean([run.cpu.decode_share for run in fast[8] + fast[1]]):.0%} |", flush=True)  # fmt: skip


def _fast(runner: Runner, inputs: list[TensorSpec], clip: Path, size: tuple[int, int],
          batching: BatchingSettings, args: argparse.Namespace) -> VideoRun:  # fmt: skip
    settings = VideoSettings(batching=batching, streams=8, seconds=args.fast_seconds)
    return play(runner, inputs, [clip], settings, size=size)


def _held(found: Capacity) -> str:
    tried = ",".join(f"{n}{'+' if ok else '-'}" for n, ok in found.tried.items())
    return f"{found.streams} ({tried})"


if __name__ == "__main__":
    main()
