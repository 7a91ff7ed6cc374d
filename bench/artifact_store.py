"""What the artifact store costs: intake's declared-size check, and S3 fetch-once against a cache hit.

1. Declared-size check: `check_declared_sizes` alone against the whole `inspect_model` on the same
   model (a transformer-sized MLP with many initializers), median of several rounds. Prints the
   check's share of intake time.
2. S3 store, against moto's S3-compatible server in this process (a local HTTP server, so this
   measures our code path and HTTP on loopback, not a real network): publish once, publish again
   (already there: one HEAD), a worker's first fetch (download + SHA-256 + rename) and its
   cache hit. Prints first-fetch / cache-hit.

Run: .venv/bin/python bench/artifact_store.py [--mb 64] [--rounds 5]   (needs the dev extra)
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from optistudio.cli.launcher import free_port  # noqa: E402
from optistudio.core.model.declared_sizes import check_declared_sizes  # noqa: E402
from optistudio.core.model.intake import inspect_model, store_model  # noqa: E402
from optistudio.services.artifact_store import S3Store  # noqa: E402

LAYERS = 24


def build_model(path: Path, megabytes: int) -> Path:
    """An MLP of LAYERS square MatMuls whose weights add up to about `megabytes`."""
    width = int((megabytes * 1024**2 / 4 / LAYERS) ** 0.5)
    rng = np.random.default_rng(0)
    weights, nodes, previous = [], [], "x"
    for index in range(LAYERS):
        weight = rng.standard_normal((width, width), dtype=np.float32) * 0.01
        weights.append(numpy_helper.from_array(weight, f"w{index}"))
        nodes.append(helper.make_node("MatMul", [previous, f"w{index}"], [f"h{index}"]))
        previous = f"h{index}"
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info(previous, TensorProto.FLOAT, ["batch", width])],
        initializer=weights,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def median_seconds(action: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def size_check(path: Path, rounds: int) -> None:
    model = onnx.load(str(path), load_external_data=False)
    check = median_seconds(lambda: check_declared_sizes(model, 2**40), rounds)
    whole = median_seconds(lambda: inspect_model(path, max_bytes=2**40), rounds)
    print(
        f"declared-size check {check * 1e3:.2f} ms, whole intake {whole * 1e3:.1f} ms "
        f"-> check is {check / whole:.2%} of intake"
    )


def s3_round_trip(path: Path, scratch: Path, rounds: int) -> None:
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1"
    )
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="bench")
        stored = store_model(
            path, artifact_dir=scratch / "studio", max_bytes=2**40, max_tensor_bytes=2**40
        )
        studio = S3Store("s3://bench/p", cache_dir=scratch / "studio", endpoint_url=endpoint)
        start = time.perf_counter()
        address = studio.publish(stored)
        first_publish = time.perf_counter() - start
        again = median_seconds(lambda: studio.publish(stored), rounds)
        fetches = []
        for index in range(rounds):
            worker = S3Store("s3://bench/p", cache_dir=scratch / f"w{index}", endpoint_url=endpoint)
            start = time.perf_counter()
            worker.local_model(address, stored.info.sha256)
            fetches.append(time.perf_counter() - start)
        hit = median_seconds(lambda: worker.local_model(address, stored.info.sha256), rounds * 20)
    finally:
        server.stop()
    fetch = statistics.median(fetches)
    megabytes = stored.info.size_bytes / 1024**2
    print(
        f"model {megabytes:.1f} MB; publish {first_publish:.2f} s, publish again "
        f"{again * 1e3:.1f} ms (already stored: {first_publish / again:.0f}x less)"
    )
    print(
        f"worker first fetch {fetch:.2f} s ({megabytes / fetch:.0f} MB/s), cache hit "
        f"{hit * 1e6:.0f} us -> first fetch / cache hit = {fetch / hit:,.0f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=64, help="model size in MB")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        path = build_model(Path(scratch) / "mlp.onnx", args.mb)
        size_check(path, args.rounds)
        s3_round_trip(path, Path(scratch), args.rounds)


if __name__ == "__main__":
    main()
