"""`optistudio serve` on a bundle against the same model in a plain ONNX Runtime loop.

Model: an MLP built here (FEATURES -> HIDDEN -> HIDDEN -> CLASSES, FP32, 63 MB of weights,
free batch dim; written to a temporary folder, removed at the end), the kind of model whose batch-1 run reads every weight for one row,
so a batch of 8 costs little more than one row. One request = one row.

Systems, both on the same intra-op threads (the serving default: the cores but one, at least
one, `serving_threads`), idle threads not spinning:
- serve: the model exported as a bundle (max batch --max-batch, queue delay --timeout-ms, one
  instance), served by `python -m optistudio.cli serve BUNDLE --port 0` in its own process;
  each request is a KServe v2 JSON POST over a kept-alive loopback connection (http.client,
  one connection per client thread, --clients threads).
- plain: one InferenceSession in this process, one thread taking the requests in arrival
  order, session.run on each alone (no HTTP, no batching): what a script that loops over its
  requests does.
Arrivals: open-loop Poisson from the project's load generator (`run_load`, seed 0) at three
rates, set from the plain loop's batch-1 capacity c = 1 / (its mean batch-1 latency, measured
first): 0.5 c, 0.9 c and 1.5 c. Each rate runs `--seconds` or `--requests`, whichever ends
first; latency = answer - send (send on the load generator's clock), throughput = answered /
(last answer - first send), after a 10 % warm-up. Loopback only; bounded in count and time.

    .venv/bin/python bench/serve.py [--seconds 8] [--requests 4000] [--json out.json]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.batching.loadgen import run_load
from optistudio.core.batching.pipeline import Response
from optistudio.core.batching.settings import serving_threads
from optistudio.core.machine.environment import cpu_model, isa_flags
from optistudio.core.model.intake import inspect_model
from optistudio.core.report.bundle import BundleSource, write_bundle

FEATURES, HIDDEN, CLASSES = 1024, 3072, 1000
RATE_SHARES = (0.5, 0.9, 1.5)


def mlp(path: Path) -> Path:
    """x [n, FEATURES] -> Gemm+Relu -> Gemm+Relu -> Gemm -> y [n, CLASSES]."""
    rng = np.random.default_rng(0)
    sizes = [(FEATURES, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, CLASSES)]
    weights, nodes, current = [], [], "x"
    for index, (rows, cols) in enumerate(sizes):
        scale = 1.0 / np.sqrt(rows)
        weight = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)
        weights += [numpy_helper.from_array(weight, f"w{index}")]
        weights += [numpy_helper.from_array(np.zeros(cols, np.float32), f"b{index}")]
        out = "y" if index == len(sizes) - 1 else f"h{index}"
        gemm = f"g{index}" if out != "y" else "y"
        nodes.append(helper.make_node("Gemm", [current, f"w{index}", f"b{index}"], [gemm]))
        if out != "y":
            nodes.append(helper.make_node("Relu", [gemm], [out]))
        current = out
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes,
        "mlp",
        [info("x", TensorProto.FLOAT, ["batch", FEATURES])],
        [info("y", TensorProto.FLOAT, ["batch", CLASSES])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def bundle_of(model: Path, folder: Path, max_batch: int, timeout_ms: float) -> Path:
    serving = {"max_batch_size": max_batch, "timeout_ms": timeout_ms, "instances": 1}
    source = BundleSource(
        name="mlp",
        model_path=model,
        info=inspect_model(model),
        coreml_precisions=[],
        serving=serving,
    )
    return write_bundle(source, folder / "mlp.zip").path


class PlainLoop:
    """One session, one thread, requests in arrival order, each run alone; `submit` is what
    the load generator calls (a Pipeline's interface)."""

    def __init__(self, model: Path, threads: int) -> None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        self.queue: queue.Queue[tuple[dict[str, np.ndarray], Future[Response], float] | None] = (
            queue.Queue()
        )
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def submit(self, feeds: dict[str, np.ndarray]) -> Future[Response]:
        future: Future[Response] = Future()
        self.queue.put((feeds, future, time.perf_counter()))
        return future

    def record_batches(self) -> list[Any]:
        return []

    def _serve(self) -> None:
        while (item := self.queue.get()) is not None:
            feeds, future, queued = item
            started = time.perf_counter()
            outputs = self.session.run(None, feeds)
            done = time.perf_counter()
            compute = (done - started) * 1000
            future.set_result(
                Response(outputs, (started - queued) * 1000, compute, 1, 0, run_ms=compute)
            )

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()

    def batch_one_ms(self, feeds: dict[str, np.ndarray], runs: int = 60) -> float:
        for _ in range(5):
            self.session.run(None, feeds)
        started = time.perf_counter()
        for _ in range(runs):
            self.session.run(None, feeds)
        return (time.perf_counter() - started) / runs * 1000


class HttpClients:
    """KServe v2 JSON POSTs from `clients` threads, each on its own kept-alive connection;
    `submit` is what the load generator calls."""

    def __init__(self, host: str, port: int, model: str, clients: int) -> None:
        self.host, self.port, self.path = host, port, f"/v2/models/{model}/infer"
        self.local = threading.local()
        self.pool = ThreadPoolExecutor(clients, thread_name_prefix="client")

    def submit(self, feeds: dict[str, np.ndarray]) -> Future[Response]:
        return self.pool.submit(self._post, feeds)

    def record_batches(self) -> list[Any]:
        return []

    def _post(self, feeds: dict[str, np.ndarray]) -> Response:
        inputs = [
            {"name": n, "shape": list(a.shape), "datatype": "FP32", "data": a.ravel().tolist()}
            for n, a in feeds.items()
        ]
        connection = self._connection()
        connection.request("POST", self.path, json.dumps({"inputs": inputs}))
        answer = connection.getresponse()
        body = json.loads(answer.read())
        if answer.status != 200:
            raise RuntimeError(body.get("error"))
        said = body["parameters"]
        outputs = [np.asarray(o["data"], np.float32).reshape(o["shape"]) for o in body["outputs"]]
        compute = float(said["compute_ms"])
        return Response(
            outputs, float(said["queue_ms"]), compute, int(said["batch_size"]), 0, compute
        )

    def _connection(self) -> http.client.HTTPConnection:
        if getattr(self.local, "connection", None) is None:
            self.local.connection = http.client.HTTPConnection(self.host, self.port, timeout=120)
        return self.local.connection

    def close(self) -> None:
        self.pool.shutdown()


def start_server(bundle: Path) -> tuple[subprocess.Popen[str], int]:
    env = dict(os.environ, NNCF_CI="1")
    command = [sys.executable, "-m", "optistudio.cli", "serve", str(bundle), "--port", "0"]
    process = subprocess.Popen(
        [*command, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    assert process.stderr is not None
    for line in process.stderr:
        if line.startswith("serving "):
            port = int(line.split(" at http://127.0.0.1:", 1)[1].split("/", 1)[0])
            return process, port
    raise SystemExit(f"the server did not start (exit {process.wait()})")


def stop_server(process: subprocess.Popen[str]) -> dict[str, Any]:
    process.send_signal(signal.SIGINT)
    stdout, _ = process.communicate(timeout=120)
    return dict(json.loads(stdout))


def measured(system: Any, feeds: list[dict[str, np.ndarray]], rate: float, args: Any) -> dict:
    run = run_load(
        system, feeds, process="poisson", rate=rate, requests=args.requests,
        seconds=args.seconds, seed=0,
    )  # fmt: skip
    result = run.result
    return {
        "throughput": result.throughput,
        "p50_ms": result.p50_ms,
        "p99_ms": result.p99_ms,
        "mean_batch_size": result.mean_batch_size,
        "completed": result.completed,
        "failed": result.failed,
        "saturated": result.saturated,
    }


def cpu_line() -> str:
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16")
    flags = [flag for flag in wanted if flag in isa_flags()]
    return f"{cpu_model()}, {os.cpu_count()} logical CPUs; flags: {' '.join(flags) or 'none'}"


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| rate (req/s) | system | throughput (req/s) | p50 (ms) | p99 (ms) | mean batch |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        lines.append(
            f"| {row['rate']:.0f} ({row['share']:.1f} c) | {row['system']} | "
            f"{row['throughput']:.1f} | {row['p50_ms']:.1f} | {row['p99_ms']:.1f} | "
            f"{row['mean_batch_size']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="longest run per rate")
    parser.add_argument("--requests", type=int, default=4000, help="most requests per rate")
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--timeout-ms", type=float, default=2.0)
    parser.add_argument("--clients", type=int, default=32, help="HTTP client threads")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    threads = serving_threads()
    folder = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    try:
        model = mlp(folder / "mlp.onnx")
        bundle = bundle_of(model, folder, args.max_batch, args.timeout_ms)
        rng = np.random.default_rng(1)
        feeds = [{"x": rng.standard_normal((1, FEATURES)).astype(np.float32)} for _ in range(64)]
        plain = PlainLoop(model, threads)
        capacity = 1000.0 / plain.batch_one_ms(feeds[0])
        print(f"{cpu_line()}\nthreads {threads}; plain batch-1 capacity c = {capacity:.1f} req/s")
        server, port = start_server(bundle)
        clients = HttpClients("127.0.0.1", port, "mlp", args.clients)
        rows = []
        try:
            for share in RATE_SHARES:
                rate = share * capacity
                for name, system in (("plain ORT loop", plain), ("optistudio serve", clients)):
                    figures = measured(system, feeds, rate, args)
                    rows.append({"rate": rate, "share": share, "system": name, **figures})
                    print(f"  {rate:.0f} req/s, {name}: {json.dumps(figures)}", flush=True)
        finally:
            clients.close()
            plain.close()
            report = stop_server(server)
        print(table(rows))
        print(f"server's own report: {json.dumps(report)}")
        if args.json:
            args.json.write_text(
                json.dumps(
                    {
                        "cpu": cpu_line(),
                        "threads": threads,
                        "rows": rows,
                        "capacity": capacity,
                        "server": report,
                    },
                    indent=2,
                )
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
