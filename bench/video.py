"""How many real-time 25 fps streams at 640x360 this machine holds, for two small CNNs, batched
against per-frame (max batch 1), FP32 against INT8 (the int8_static pass, calibrated on the
clip's own frames), in one run. Also prints each setting's fast-mode throughput at 8 streams.

    .venv/bin/python bench/video.py [--probe-seconds 2] [--max-streams 32]

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
from optistudio.core.batching.settings import (
    BatchingSettings,
    serving_options,
    with_serving_threads,
)
from optistudio.core.data.images import ImagePreprocessing, preprocess
from optistudio.core.model.intake import inspect_model
from optistudio.core.passes.base import PassContext
from optistudio.core.passes.quantize import Int8StaticConfig, run_int8_static
from optistudio.core.video.clips import make_clip
from optistudio.core.video.decode import FrameSource
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
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="video-bench-"))
    clip = make_clip(work / "clip.mp4", seconds=4, fps=FPS, size=SIZE)
    print(f"clip 640x360 @ {FPS} fps, {platform.processor() or platform.machine()}, "
          f"threads {with_serving_threads(serving_options()).threads}")  # fmt: skip
    print(
        "| model | precision | batching | real-time streams | fast fps at 8 streams | mean batch | decode CPU share |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, (size, widths) in MODELS.items():
        fp32 = build_cnn(work / f"{widths[-1]}-{len(widths)}.onnx", size, widths)
        int8 = work / f"{fp32.stem}-int8.onnx"
        context = PassContext(work_dir=work / f"q-{fp32.stem}", calibration=ClipFrames(clip, size))
        run_int8_static(fp32, int8, Int8StaticConfig(), context)
        for precision, path in (("FP32", fp32), ("INT8", int8)):
            for batching in (
                BatchingSettings(max_batch_size=8, timeout_ms=5),
                BatchingSettings(max_batch_size=1),
            ):
                _row(name, precision, path, clip, size, batching, args)


def _row(name: str, precision: str, path: Path, clip: Path, size: tuple[int, int],
         batching: BatchingSettings, args: argparse.Namespace) -> None:  # fmt: skip
    from optistudio.core.video.engine import play

    loaded = get_backend("onnxruntime").load(
        path, with_serving_threads(SessionOptions(spin_wait=False))
    )
    inputs = inspect_model(path).inputs
    try:
        settings = VideoSettings(batching=batching)
        found = capacity(
            loaded.run, inputs, [clip], settings, size, args.max_streams, args.probe_seconds
        )
        fast = play(
            loaded.run,
            inputs,
            [clip],
            settings.model_copy(update={"streams": 8, "seconds": 3}),
            size=size,
        )
    finally:
        loaded.close()
    label = "per-frame" if batching.max_batch_size == 1 else f"batch<=8, {batching.timeout_ms:g} ms"
    tried = ",".join(f"{n}{'+' if ok else '-'}" for n, ok in found.tried.items())
    print(f"| {name} | {precision} | {label} | {found.streams} ({tried}) | {fast.fps:.0f} | "
          f"{fast.mean_batch_size:.2f} | {fast.cpu.decode_share:.0%} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
