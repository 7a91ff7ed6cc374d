"""Runs inside the studio container of the compose stack, fed on stdin by check_compose.py:

    docker exec -i <studio container> python - <command> [args] < tests/compose/in_stack.py

It uses the studio's own code and settings (database, broker, artifact store from the container's
environment), so a model is stored and a job is submitted exactly as the studio's Models page does
it: intake, route to a live worker's queue, commit the job row, send its id by name. Each command
prints one JSON line last on stdout.

Commands:
    model                       build a small ONNX model in code and store it (upload intake)
    submit MODEL SECONDS COUNT  submit COUNT benchmark jobs that measure for about SECONDS each
    jobs ID...                  status, worker, attempts and message of each job
    workers                     live workers (database heartbeats) and the nodes answering ping
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

STALE_FACTOR = 3  # studio/state.py: a worker is live within three heartbeats


def build_model(path: Path) -> Path:
    """y = relu(x @ W + b), dynamic batch, deterministic weights (tests/conftest.py's model)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "W")
    bias = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["h"]),
            helper.make_node("Add", ["h", "b"], ["a"]),
            helper.make_node("Relu", ["a"], ["y"]),
        ],
        "compose_check",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 32])],
        initializer=[weight, bias],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def command_model() -> dict[str, Any]:
    from optistudio.services.catalog import add_model_file
    from optistudio.studio import state

    with tempfile.TemporaryDirectory() as scratch:
        path = build_model(Path(scratch) / "compose_check.onnx")
        entry = add_model_file(
            state.session_factory(), state.settings(), path, name="compose-check"
        )
    return {"model_id": entry.model_id, "created": entry.created, "stored": str(entry.path)}


def command_submit(model_id: int, seconds: float, count: int) -> dict[str, Any]:
    from optistudio.core.measure.benchmark import BenchmarkSpec
    from optistudio.studio import state
    from optistudio.studio.jobs_services import submit_benchmark

    spec = BenchmarkSpec(
        batch_sizes=[1],
        warmup_runs=1,
        min_runs=5,
        min_seconds=seconds,
        max_seconds=seconds + 2,
        window_seconds=min(0.5, max(0.02, seconds / 4)),
    )
    queue = state.route_to(spec.backend, spec.device)  # as studio/views/models.py does
    jobs = [
        submit_benchmark(
            state.session_factory(), model_id=model_id, spec=spec, send=state.sender(queue)
        )
        for _ in range(count)
    ]
    return {"queue": queue, "jobs": jobs}


def command_jobs(job_ids: list[int]) -> dict[str, Any]:
    from optistudio.db.queries import get_job
    from optistudio.db.session import transaction
    from optistudio.studio import state

    rows: dict[str, dict[str, Any] | None] = {}
    with transaction(state.session_factory()) as s:
        for job_id in job_ids:
            job = get_job(s, job_id=job_id)
            if job is None:
                rows[str(job_id)] = None
                continue
            rows[str(job_id)] = {
                "status": job.status.value,
                "worker": job.worker or "",
                "attempts": job.attempts,
                "message": job.message or "",
            }
    return {"jobs": rows}


def command_workers() -> dict[str, Any]:
    from optistudio.studio import state
    from optistudio.studio.worker_services import worker_rows
    from optistudio.workers.app import app

    settings = state.settings()
    rows = worker_rows(state.session_factory(), max_age_s=settings.heartbeat_s * STALE_FACTOR)
    live = sorted(
        r["worker"] for r in rows if r["state"] == "live" and "onnxruntime" in r["offers"]
    )
    replies = app.control.ping(timeout=5.0) or []
    pinged = sorted(node for reply in replies for node in reply)
    return {"live": live, "pinged": pinged}


def main(argv: list[str]) -> dict[str, Any]:
    command, args = argv[0], argv[1:]
    if command == "model":
        return command_model()
    if command == "submit":
        return command_submit(int(args[0]), float(args[1]), int(args[2]))
    if command == "jobs":
        return command_jobs([int(a) for a in args])
    if command == "workers":
        return command_workers()
    raise SystemExit(f"unknown command {command!r}: model, submit, jobs or workers")


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
