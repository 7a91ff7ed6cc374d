"""`optistudio video MODEL [--source FILE] --streams N --seconds S`: video analytics on a model.

Plays N streams of the source files (round robin; streams on one file start at their own
offsets), decodes them with PyAV, batches frames across streams with the Pipeline, and prints
per-stream fps, latency p50/p99 and drops, the totals, the decoder, and the speedup over
per-frame inference (the same streams at max batch 1). --capacity N also searches how many
real-time streams (up to N) this machine holds for the model. On a detector (boxes and scores
outputs) each frame's boxes go through NMS on their own, and each stream reports its boxes per
frame.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from optistudio.cli.args import (
    add_input_flags,
    input_options,
    parse_float_list,
    resolved_inputs,
    validated,
)
from optistudio.cli.output import print_json


def add_video_parser(commands: Any) -> None:
    video = commands.add_parser(
        "video", help="decode video streams and infer their frames batched across streams"
    )
    add = video.add_argument
    add("model", type=Path, help="path to an .onnx image model")
    add(
        "--source",
        type=Path,
        action="append",
        help="a video file (repeatable); none: a generated clip of moving shapes, 640x360 at "
        "25 fps, as on the Video page",
    )
    add("--streams", type=int, default=1, help="streams to play (default 1)")
    add("--seconds", type=float, default=5.0, help="how long each stream plays (default 5)")
    add("--realtime", action="store_true", help="play each stream at its frame rate")
    add("--drop-policy", choices=("drop_oldest", "skip_to_newest"), default="drop_oldest")
    add("--max-batch-size", type=int, default=8)
    add("--timeout-ms", type=float, default=2.0)
    add("--backend", default="onnxruntime")
    add("--threads", type=int, help="intra-op threads (default: the cores but one)")
    add("--layout", choices=("NCHW", "NHWC"), default="NCHW")
    add("--color", choices=("RGB", "BGR", "GRAY"), default="RGB")
    add(
        "--mean",
        type=parse_float_list,
        help="per-channel mean after scaling, e.g. 0.485,0.456,0.406",
    )
    add("--std", type=parse_float_list, help="per-channel std, e.g. 0.229,0.224,0.225")
    add("--no-baseline", action="store_true", help="skip the per-frame (max batch 1) run")
    add("--capacity", type=int, metavar="N", help="search the real-time streams held, up to N")
    add("--probe-seconds", type=float, default=3.0, help="length of each capacity probe")
    add_input_flags(video)
    add("--json", action="store_true", help="print one JSON object")


def command_video(args: argparse.Namespace) -> int:
    import tempfile

    from optistudio.core.video.clips import generated_clip

    scratch = tempfile.TemporaryDirectory(prefix="optistudio-clip-")
    sources = list(args.source or [generated_clip(Path(scratch.name))])
    with scratch:
        return _played(args, sources)


def _played(args: argparse.Namespace, sources: list[Path]) -> int:
    from optistudio.core.backends.target import RunTarget
    from optistudio.core.video.run import run_video

    shapes = input_options(args).full_shapes()  # first: --free-dims sets args.model
    report = run_video(
        args.model,
        sources,
        _settings(args),
        target=RunTarget(backend=args.backend, threads=args.threads, spin_wait=False),
        shapes=shapes,
        baseline=not args.no_baseline,
        capacity_streams=args.capacity,
        probe_seconds=args.probe_seconds,
    )
    payload = video_payload(report) | {"inputs": resolved_inputs(args)}
    if args.json:
        print_json(payload)
    else:
        _print_summary(payload)
    return 0


def _settings(args: argparse.Namespace) -> Any:
    from optistudio.core.batching.settings import BatchingSettings
    from optistudio.core.data.images import ImagePreprocessing
    from optistudio.core.video.settings import VideoSettings

    batching = validated(
        BatchingSettings,
        {"max_batch_size": args.max_batch_size, "timeout_ms": args.timeout_ms},
        "batching",
    )
    pre = validated(
        ImagePreprocessing,
        {"layout": args.layout, "color": args.color, "mean": args.mean, "std": args.std},
        "preprocessing",
    )
    fields = {
        "streams": args.streams,
        "seconds": args.seconds,
        "realtime": args.realtime,
        "drop_policy": args.drop_policy,
        "batching": batching,
        "preprocessing": pre,
    }
    return validated(VideoSettings, fields, "video")


def video_payload(report: Any) -> dict[str, Any]:
    """The JSON document: per-stream figures first, then totals, decoder and speedup."""
    batched = report.batched
    return {
        "model": report.model,
        "backend": report.backend,
        "input_shape": report.input_shape,
        "decoder": batched.decoder,
        "decoding": batched.decoding,
        "pacing": batched.pacing,
        "detector": batched.detector,
        "streams": [_stream(stream) for stream in batched.streams],
        "totals": {
            "frames": batched.frames,
            "fps": batched.fps,
            "p50_ms": batched.p50_ms,
            "p99_ms": batched.p99_ms,
            "dropped": batched.dropped,
            "seconds": batched.seconds,
            "mean_batch_size": batched.mean_batch_size,
            "cpu": batched.cpu.model_dump(),
        },
        "per_frame": None
        if report.per_frame is None
        else {
            "fps": report.per_frame.fps,
            "dropped": report.per_frame.dropped,
            "p99_ms": max((s.p99_ms for s in report.per_frame.streams), default=0.0),
        },
        "speedup": report.speedup,
        "batched_rewrite": report.batched_rewrite or None,
        "instances": report.instances,
        "batch_refused": report.batch_refused or None,
        "capacity": None if report.capacity is None else report.capacity.model_dump(mode="json"),
        "settings": {
            "max_batch_size": batched.max_batch_size,
            "timeout_ms": batched.timeout_ms,
            "drop_policy": batched.drop_policy,
        },
    }


def _stream(stream: Any) -> dict[str, Any]:
    """One stream's figures; its boxes per frame only on a detector."""
    fields = {"stream", "source", "offset_s", "fps", "p50_ms", "p99_ms", "dropped", "frames"}
    if stream.boxes_per_frame is not None:
        fields.add("boxes_per_frame")
    return dict(stream.model_dump(include=fields))


def _print_summary(payload: dict[str, Any]) -> None:
    totals = payload["totals"]
    for served in ("batched_rewrite", "batch_refused"):
        if payload.get(served):
            print(payload[served])
    print(
        f"{payload['model']} on {payload['backend']}, input {payload['input_shape']}, "
        f"decoder {payload['decoder']} ({payload['decoding']}), {payload['pacing']}"
    )
    for stream in payload["streams"]:
        print(
            f"  stream {stream['stream']} ({stream['source']} @ {stream['offset_s']:.2f}s): "
            f"{stream['fps']:.1f} fps, p50 {stream['p50_ms']:.1f} ms, "
            f"p99 {stream['p99_ms']:.1f} ms, dropped {stream['dropped']}"
            + (
                f", {stream['boxes_per_frame']:.1f} boxes per frame"
                if "boxes_per_frame" in stream
                else ""
            )
        )
    print(
        f"total {totals['fps']:.1f} fps, {totals['dropped']} dropped, mean batch "
        f"{totals['mean_batch_size']:.2f}, decode {totals['cpu']['decode_share']:.0%} of CPU"
    )
    if payload["speedup"] is not None:
        print(f"batched / per-frame: {payload['speedup']:.2f}x")
    if payload["capacity"] is not None:
        capacity = payload["capacity"]
        print(f"real-time streams held: {capacity['streams']} at {capacity['frame_rate']:g} fps")
